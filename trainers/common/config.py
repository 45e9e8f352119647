"""The trainers' config loader, now :mod:`coa_envs.configkit` (a leaf every layer may import).

Kept so ``from trainers.common.config import load_config`` goes on working; new code imports
the toolkit from :mod:`coa_envs.configkit`.
"""

from coa_envs import configkit as _configkit
from coa_envs.configkit import *  # noqa: F403  (a compatibility face: every public name)

__all__ = list(_configkit.__all__)
