"""Distillation: teacher runs become SFT data, through conversion and progressive filtering.

``coa teach`` (a multi-agent system, :mod:`agents.teachers`) or ``coa eval`` (any agent) plays
the envs; :func:`distill` converts teacher runs into single-model CoA trajectories
(:mod:`~trainers.distill.convert`), filters them stage by stage
(:mod:`~trainers.distill.pipeline`), replays every survivor through a fresh env
(:mod:`~trainers.distill.replay`), keeps the best under the caps (:mod:`~trainers.distill.rank`)
and writes trajectory JSONL plus, optionally, the seed's ShareGPT SFT format
(:mod:`~trainers.distill.export`). ``trainers.data.load_samples`` reads both.
"""

from trainers.distill.convert import ConversionError, clean_role_span, convert, is_teacher_run
from trainers.distill.export import to_sharegpt
from trainers.distill.pipeline import STAGES, DistillConfig, DistillReport, distill
from trainers.distill.rank import PREFERENCES, quality_score
from trainers.distill.replay import EnvPool, replay_reason

__all__ = [
    "PREFERENCES",
    "STAGES",
    "ConversionError",
    "DistillConfig",
    "DistillReport",
    "EnvPool",
    "clean_role_span",
    "convert",
    "distill",
    "is_teacher_run",
    "quality_score",
    "replay_reason",
    "to_sharegpt",
]
