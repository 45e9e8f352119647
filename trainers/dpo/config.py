"""The DPO trainer's configuration: the shared supervised sections plus ``data`` and ``dpo``.

``DPOConfig`` shares the sections that mean the same thing for SFT (``trainers/common``):
``model`` (:class:`~trainers.common.model.PackedModelSection`: path, tokenizer, attention,
LoRA, ...), ``optim`` (:class:`~trainers.common.sections.OptimSection`; ``grad_accum`` is
packed rows per optimiser step, each row holding whole pairs), ``resources`` and
``bookkeeping`` (with its own default directory). New are ``data`` (the pairs file from
``coa pairs`` and how pairs become packed rows) and ``dpo`` (beta, loss variant, reference
model). Loaded through the config toolkit (:mod:`coa_envs.configkit`): YAML + ``key=value``,
one ``ConfigError`` naming the key. Stdlib + PyYAML only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from coa_envs.configkit import ConfigError, check_fields
from coa_envs.configkit import load_config as _load
from trainers.common.model import moved_model_keys
from trainers.common.sections import LoopBookkeeping, check_rows
from trainers.common.supervised_config import SupervisedConfig

__all__ = ["ConfigError", "DPOBookkeeping", "DPOConfig", "DPOData", "DPOLoss", "load_config"]


@dataclass
class DPOData:
    """The preference pairs and how they become packed rows."""

    train_path: str = ""
    """``pairs.jsonl`` written by ``coa pairs RUN_DIR --out FILE``."""
    eval_path: str | None = None
    """Held-out pairs in the same format (None: see eval_fraction)."""
    eval_fraction: float = 0.0
    """Hold out this share of the train pairs for eval when ``eval_path`` is unset."""
    max_seq_len: int = 2048
    """Longest side of a pair in tokens (prompt + response); longer ones follow truncation."""
    truncation: Literal["drop", "truncate_right", "error"] = "drop"
    """A side longer than ``max_seq_len``: ``drop`` the pair (default: cutting the tail would
    cut the answer the preference is about), ``truncate_right``, or ``error``."""
    packing: bool = True
    """Pack several pairs per row (attention stays per sample); false: one pair per row."""
    pack_len: int | None = None
    """Tokens per packed row; None is resolved to ``2 * max_seq_len`` (one whole pair)."""

    def __post_init__(self) -> None:
        check_fields(self, "data.")
        if not self.train_path:
            raise ConfigError("data.train_path is required: a pairs.jsonl from "
                              "`coa pairs RUN_DIR --out pairs.jsonl`")
        check_rows(self, 2, ": a row holds both sides of a pair")


@dataclass
class DPOLoss:
    """The preference objective and its reference model (``trainers/dpo/loss.py``)."""

    beta: float = 0.1
    """Strength of the pull toward the reference: the implicit reward is beta * log-ratio."""
    loss_type: Literal["sigmoid", "ipo"] = "sigmoid"
    """``sigmoid``: DPO's logistic loss; ``ipo``: squared loss on per-token mean log-ratios."""
    label_smoothing: float = 0.0
    """Conservative DPO: the share of preference labels assumed wrong (sigmoid only)."""
    reference: Literal["precompute", "frozen"] = "precompute"
    """``precompute``: score every pair under the reference once before training (one
    forward per pair, no second model in memory; saved with each checkpoint); ``frozen``: keep
    the reference model beside the policy and score each row as it is trained (a LoRA policy
    uses its own base with the adapter switched off)."""
    reference_path: str | None = None
    """A different reference model (directory or HF id, same tokenizer); None: the policy
    as it starts (model.path), which is standard DPO."""
    disable_dropout: bool = True
    """Switch dropout off in policy and reference, so both score a sequence the same way and
    the first step's margin is exactly 0."""

    def __post_init__(self) -> None:
        check_fields(self, "dpo.")
        if self.beta <= 0:
            raise ConfigError(f"dpo.beta={self.beta}: must be > 0 (0.1 is common)")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise ConfigError(f"dpo.label_smoothing={self.label_smoothing}: must be in [0, 0.5)")
        if self.loss_type == "ipo" and self.label_smoothing:
            raise ConfigError("dpo.label_smoothing applies to loss_type=sigmoid; IPO's squared "
                              "loss already bounds the margin: set it to 0")


@dataclass
class DPOBookkeeping(LoopBookkeeping):
    """Run directory, checkpoints, resume, logging and eval cadence."""

    output_dir: str = "runs/dpo"


@dataclass
class DPOConfig(SupervisedConfig):
    """Masked DPO on CoA preference pairs (log-probs over model-generated tokens only).

    ``model`` is the policy: usually the SFT model that sampled the pairs, or ``tiny`` (a fresh
    tiny model whose tokenizer is trained on the pairs' text). DPO runs in one process (one GPU
    or the CPU), so ``resources.deepspeed`` stays unset."""

    bookkeeping: DPOBookkeeping = field(default_factory=DPOBookkeeping)
    """Run directory, checkpoints, resume, logging."""
    data: DPOData = field(default_factory=DPOData)
    """The pairs; ``data.train_path`` is required."""
    dpo: DPOLoss = field(default_factory=DPOLoss)
    """beta, loss variant, reference model."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.resources.deepspeed:
            raise ConfigError("resources.deepspeed: the DPO trainer runs in one process "
                              "(one GPU or the CPU); leave resources.deepspeed unset")
        if self.model.path == "tiny" and self.dpo.reference_path:
            raise ConfigError("model.path=tiny builds a fresh model whose tokenizer is trained "
                              "on the pairs; a separate dpo.reference_path cannot share it")


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                values: dict[str, Any] | None = None) -> DPOConfig:
    """YAML file, then ``values`` (nested or dotted keys), then ``key=value`` overrides."""
    return _load(DPOConfig, path, overrides, values, resolve=moved_model_keys)
