"""Masked SFT on CoA trajectories: config, model, loop and checkpoints, one module each.

``trainers.sft.trainer`` is the loop read top to bottom; this package face hands on the names a
user needs (``load_config`` + ``train``) so ``from trainers.sft import train`` keeps working.
"""

from trainers.sft.trainer import SFTConfig, SFTResult, load_config, train

__all__ = ["SFTConfig", "SFTResult", "load_config", "train"]
