"""Reward audits: degenerate policies played against a reward, to see what it pays for nothing.

RL optimises whatever a reward pays. A policy that exits early, answers a constant, lists
every candidate, copies what it was shown, injects a verdict for a judge or farms format and
tool-use terms must earn nothing from a correctness term (and at most the documented shaping
from the others). :mod:`coa_envs.audit.policies` holds those policies;
:func:`~coa_envs.audit.runner.audit_env` plays them on an env's tasks and reports the best
reward each reached (``coa audit-reward ENV``). ``tests/rewards/test_hacking.py`` runs them
over every reward term.
"""

from __future__ import annotations

from coa_envs.audit.policies import KINDS, POLICIES, DegeneratePolicy, policies_for
from coa_envs.audit.runner import AuditReport, PolicyResult, audit_env

__all__ = ["KINDS", "POLICIES", "AuditReport", "DegeneratePolicy", "PolicyResult", "audit_env", "policies_for"]
