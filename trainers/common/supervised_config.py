"""The config shape every supervised trainer (SFT, DPO) shares: the sections
:class:`~trainers.common.supervised.SupervisedRun` reads, declared once.

A trainer's config subclasses :class:`SupervisedConfig`, adds its own sections (``data``, DPO's
``dpo``) and narrows ``bookkeeping`` to its own default run directory. A redefined field keeps
its place, so every supervised config lists ``model``, ``optim``, ``resources`` and
``bookkeeping`` first, in that order. Stdlib + PyYAML only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from coa_envs.configkit import check_fields
from trainers.common.model import PackedModelSection
from trainers.common.sections import DeviceSection, LoopBookkeeping, OptimSection

__all__ = ["SupervisedConfig"]


@dataclass
class SupervisedConfig:
    """The sections a supervised run reads the same way whichever loss it trains."""

    model: PackedModelSection = field(default_factory=PackedModelSection)
    """The model: a directory / HF id or ``tiny``; attention, LoRA, checkpointing."""
    optim: OptimSection = field(default_factory=OptimSection)
    """Optimiser, schedule, precision, run length (``grad_accum``: packed rows per step)."""
    resources: DeviceSection = field(default_factory=DeviceSection)
    """Device, threads, DeepSpeed."""
    bookkeeping: LoopBookkeeping = field(default_factory=LoopBookkeeping)
    """Run directory, checkpoints, resume, logging."""

    def __post_init__(self) -> None:
        check_fields(self)

    def to_dict(self) -> dict[str, Any]:
        """The config as a checkpoint records it (plain JSON/YAML types: the betas as a list)."""
        data = dataclasses.asdict(self)
        data["optim"]["adam_betas"] = list(self.optim.adam_betas)
        return data
