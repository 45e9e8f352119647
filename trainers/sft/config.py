"""The SFT trainer's configuration: sections, loadable from YAML, overridable by ``key=value``.

``SFTConfig`` has five sections: ``model``, ``data``, ``optim``, ``resources`` and
``bookkeeping`` (shared with the RL trainer: ``trainers/common/sections.py``). Loading goes
through the shared loader (``trainers/common/config.py``): YAML 1.1 exponent floats such as
``learning_rate: 2e-5`` are numbers, unknown keys and bad choices fail with one
``ConfigError`` naming the key, and a key of the old flat layout says where it moved.
Validation lives in each section's ``__post_init__`` and says what to change, so a bad
combination fails before any model is loaded. Stdlib + PyYAML only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from coa_envs.configkit import ConfigError, check_fields
from coa_envs.configkit import load_config as _load
from trainers.common.mixture import MixtureEntry, check_env_ids, mixture_entries
from trainers.common.model import PackedModelSection, moved_model_keys
from trainers.common.sections import DeviceSection, LoopBookkeeping, OptimSection, check_rows
from trainers.common.supervised_config import SupervisedConfig

__all__ = ["ConfigError", "SFTBookkeeping", "SFTConfig", "SFTData", "SFTMixtureEntry", "SFTModel",
           "SFTOptim", "SFTResources", "load_config"]

# The sections SFT shares with DPO (and the model section with RL) under their SFT names.
SFTModel = PackedModelSection
SFTOptim = OptimSection
SFTResources = DeviceSection


@dataclass
class SFTMixtureEntry(MixtureEntry):
    """One env of an SFT mixture: its data, drawn per packed row by ``weight``."""

    path: str = ""
    """Its training data (trajectory JSONL or the seed's SFT formats; file or directory);
    required. Made from the env (its ``split: train`` tasks, ``env_kwargs``) when missing and
    ``data.generate`` is set."""
    eval_path: str | None = None
    """Its held-out data; made from the env's ``split: test`` tasks (a fifth of
    ``generate.n`` episodes) when missing and ``data.generate`` is set. None: hold out
    ``data.eval_fraction`` of ``path``."""


@dataclass
class SFTData:
    """What is trained on, and how samples become packed rows."""

    train_path: str = ""
    """Trajectory JSONL, or the seed's ShareGPT/messages/alpaca JSON(L); file or directory."""
    envs: list[SFTMixtureEntry] = field(default_factory=list)
    """Several envs mixed by weight instead of ``train_path``: ``[{id: coa/SynthHop-v1,
    weight: 0.7, path: a.jsonl}, {id: coa/NQ-v1, weight: 0.3, path: b.jsonl}]``. Each
    optimiser step draws the env of each packed row by weight (seeded by step, so a resumed
    run draws the same); each env's rows keep their own epoch order. Metrics per env:
    ``loss/<name>`` and ``eval_loss/<name>`` (held out per env)."""
    format: Literal["auto", "trajectory", "sharegpt", "messages", "alpaca"] = "auto"
    """The records' format (auto: recognised per record)."""
    eval_path: str | None = None
    """Held-out data in the same formats (None: see eval_fraction)."""
    eval_fraction: float = 0.0
    """Hold out this share of ``train_path`` samples for eval when ``eval_path`` is unset."""
    generate: dict[str, Any] | None = None
    """Make ``train_path`` when it is missing: ``{env_id: coa/SynthHop-v1, agent: oracle,
    n: 300, seed: 0}`` runs the agent through the env and writes trajectories. With ``envs``
    leave out ``env_id``: each entry's missing ``path`` gets ``n`` episodes of its env."""
    min_reward: float | None = None
    """Keep only trajectories whose reward is at least this (rejection sampling; None: all)."""
    max_seq_len: int = 2048
    """Longest sample in tokens; longer ones follow ``truncation``."""
    truncation: Literal["drop", "truncate_right", "error"] = "truncate_right"
    """What happens to a sample longer than ``max_seq_len``."""
    packing: bool = True
    """Pack several samples per row (attention stays per sample)."""
    pack_len: int | None = None
    """Tokens per packed row (= one micro-batch); None is resolved to ``max_seq_len``."""

    def __post_init__(self) -> None:
        check_fields(self, "data.")
        if self.envs:
            self._check_mixture()
        elif not self.train_path:
            raise ConfigError("data.train_path is required (a trajectory JSONL or SFT JSON file)"
                              ", or data.envs for a mixture of envs")
        check_rows(self, 1, " or every long sample would be unpackable")

    def _check_mixture(self) -> None:
        self.envs = mixture_entries(self.envs, "data.envs", SFTMixtureEntry)  # type: ignore[assignment]
        check_env_ids(self.envs, "data.envs")
        if self.train_path or self.eval_path:
            raise ConfigError("data.envs names each env's data (its path and eval_path): drop "
                              "data.train_path and data.eval_path")
        if self.generate and "env_id" in self.generate:
            raise ConfigError("data.generate.env_id: with data.envs each entry's id is the env; "
                              "drop env_id")
        for entry in self.envs:
            if not entry.path:
                raise ConfigError(f"data.envs entry {entry.name}: give it a path (its data, "
                                  "made from the env when missing and data.generate is set)")


@dataclass
class SFTBookkeeping(LoopBookkeeping):
    """Run directory, checkpoints, resume, logging and eval cadence."""

    output_dir: str = "runs/sft"


@dataclass
class SFTConfig(SupervisedConfig):
    """Masked SFT on CoA trajectories (loss only on model-generated tokens)."""

    bookkeeping: SFTBookkeeping = field(default_factory=SFTBookkeeping)
    """Run directory, checkpoints, resume, logging."""
    data: SFTData = field(default_factory=SFTData)
    """Training (and eval) data; ``data.train_path`` is required."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.resources.deepspeed and self.optim.precision == "bf16_pure":
            raise ConfigError("with resources.deepspeed set precision in the DeepSpeed JSON; "
                              "use optim.precision bf16 or fp32")

    @property
    def effective_pack_len(self) -> int | None:
        """Tokens per packed row, or None when packing is off (one sample per row)."""
        return self.data.pack_len if self.data.packing else None


_MOVED_TO = {
    "model": ("tokenizer", "tiny", "attention", "lora", "merge_lora_on_save",
              "gradient_checkpointing", "compile"),
    "data": ("train_path", "envs", "eval_path", "eval_fraction", "generate", "min_reward",
             "max_seq_len", "truncation", "packing", "pack_len"),
    "optim": ("precision", "learning_rate", "weight_decay", "adam_betas", "max_grad_norm",
              "warmup_ratio", "warmup_steps", "num_epochs", "max_steps", "grad_accum",
              "chunked_loss"),
    "resources": ("device", "torch_threads", "deepspeed"),
    "bookkeeping": ("output_dir", "save_every", "resume", "halt_at_step", "log_every",
                    "eval_every", "tensorboard", "progress", "seed"),
}
MOVED: dict[str, str] = {old: f"{section}.{old}" for section, olds in _MOVED_TO.items()
                         for old in olds}
MOVED.update({"data_format": "data.format", "save_total_limit": "bookkeeping.keep_checkpoints"})


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                values: dict[str, Any] | None = None) -> SFTConfig:
    """YAML file, then ``values`` (nested or dotted keys), then ``key=value`` overrides."""
    return _load(SFTConfig, path, overrides, values, resolve=moved_model_keys, moved=MOVED)
