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

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainers.common.config import ConfigError, check_fields
from trainers.common.config import load_config as _load
from trainers.common.mixture import MixtureEntry, check_env_ids, mixture_entries
from trainers.common.sections import Bookkeeping

__all__ = ["ConfigError", "SFTBookkeeping", "SFTConfig", "SFTData", "SFTMixtureEntry", "SFTModel",
           "SFTOptim", "SFTResources", "load_config"]

TINY_DEFAULTS = {"vocab_size": 512, "hidden_size": 64, "layers": 2, "heads": 4, "kv_heads": 2}


@dataclass
class SFTModel:
    """The model trained, and how it attends and adapts."""

    path: str = "tiny"
    """``tiny`` (a small Qwen2 built from ``tiny`` with a tokenizer trained on the data), a
    catalogue name such as ``smollm2-135m`` (``agents.models``), or a local directory / HF
    id for ``from_pretrained``."""
    tokenizer: str | None = None
    """Tokenizer path/id when it differs from ``path`` (None: the model's own)."""
    tiny: dict[str, Any] = field(default_factory=lambda: dict(TINY_DEFAULTS))
    """Sizes for ``path: tiny`` (vocab_size, hidden_size, layers, heads, kv_heads, dropout,
    ...); keys left out keep the defaults."""
    attention: Literal["varlen", "segment_sdpa", "sdpa", "eager", "flex_attention",
                       "flash_attention_2"] = "varlen"
    """How packed rows attend: ``varlen`` (per-sample; torch's varlen kernel on CUDA),
    ``segment_sdpa``, or a transformers implementation (``sdpa``, ``eager``, ...)."""
    lora: dict[str, Any] | None = None
    """LoRA via peft, e.g. ``{r: 16, alpha: 32, dropout: 0.05, target_modules: all-linear}``;
    None trains every weight."""
    merge_lora_on_save: bool = True
    """Write the final model with the adapter merged, so plain ``from_pretrained`` loads it."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% more compute)."""
    compile: bool = False
    """``torch.compile`` each decoder layer (dynamic shapes; one compiled graph serves every
    layer): fuses the norm/activation/rotary element-wise ops and cuts the per-op launch and
    dispatch cost that bounds a small model's step on a GPU. The first steps pay the compile."""

    def __post_init__(self) -> None:
        check_fields(self, "model.")
        self.tiny = {**TINY_DEFAULTS, **self.tiny}
        if self.path == "tiny" and self.tokenizer:
            raise ConfigError("model.path=tiny trains its own tokenizer; drop model.tokenizer")


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
    """Several envs mixed by weight instead of ``train_path``: ``[{id: coa/SynthHop-v0,
    weight: 0.7, path: a.jsonl}, {id: coa/NQ-v0, weight: 0.3, path: b.jsonl}]``. Each
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
    """Make ``train_path`` when it is missing: ``{env_id: coa/SynthHop-v0, agent: oracle,
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
        if self.max_seq_len < 2:
            raise ConfigError("data.max_seq_len must be at least 2")
        if self.pack_len is None:
            self.pack_len = self.max_seq_len
        if self.pack_len < self.max_seq_len:
            raise ConfigError(f"data.pack_len ({self.pack_len}) must be >= data.max_seq_len "
                              f"({self.max_seq_len}) or every long sample would be unpackable")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ConfigError("data.eval_fraction must be in [0, 1)")
        if self.eval_path and self.eval_fraction:
            raise ConfigError("set data.eval_path or data.eval_fraction, not both")

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
class SFTOptim:
    """Optimiser, schedule, precision and the length of the run."""

    precision: Literal["fp32", "bf16", "bf16_pure"] = "fp32"
    """``fp32``; ``bf16`` (autocast, fp32 master weights); ``bf16_pure`` (bf16 weights)."""
    learning_rate: float = 1e-5
    """Peak learning rate (AdamW) of the cosine schedule."""
    weight_decay: float = 0.0
    """AdamW weight decay (not applied to biases and norms)."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of each optimiser step."""
    warmup_ratio: float = 0.0
    """Share of the steps spent warming up linearly (ignored when warmup_steps is set)."""
    warmup_steps: int | None = None
    """Warm-up steps; overrides ``warmup_ratio`` when set."""
    num_epochs: int = 1
    """Passes over the data (ignored when max_steps is set)."""
    max_steps: int | None = None
    """Total optimiser steps; overrides ``num_epochs`` when set."""
    grad_accum: int = 1
    """Packed rows per optimiser step (per process)."""
    chunked_loss: bool = True
    """Compute the LM head and loss only on trained positions, in chunks (saves memory)."""

    def __post_init__(self) -> None:
        check_fields(self, "optim.")
        self.adam_betas = tuple(float(b) for b in self.adam_betas)  # type: ignore[assignment]
        if self.grad_accum < 1 or self.num_epochs < 1:
            raise ConfigError("optim.grad_accum and optim.num_epochs must be >= 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError("optim.max_steps must be >= 1 (or unset to train num_epochs)")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError("optim.warmup_ratio must be in [0, 1)")
        if self.learning_rate <= 0:
            raise ConfigError("optim.learning_rate must be > 0")


@dataclass
class SFTResources:
    """Where the run computes."""

    device: str = "auto"
    """``auto`` (CUDA when available), ``cuda``, ``cpu`` or a torch device string."""
    torch_threads: int = 0
    """CPU threads for torch (0: torch's default). On a shared CPU one thread can be several
    times faster than two: OpenMP workers spin-wait for a core another process holds."""
    deepspeed: str | None = None
    """Path to a DeepSpeed JSON config (ZeRO-2/3); needs the ``deepspeed`` package."""

    def __post_init__(self) -> None:
        check_fields(self, "resources.")
        if self.torch_threads < 0:
            raise ConfigError("resources.torch_threads must be >= 0 (0 keeps torch's default)")


@dataclass
class SFTBookkeeping(Bookkeeping):
    """Run directory, checkpoints, resume, logging and eval cadence."""

    output_dir: str = "runs/sft"
    keep_checkpoints: int = 0
    halt_at_step: int | None = None
    """Stop (after checkpointing) at this step without changing the schedule; for tests."""
    log_every: int = 1
    """Log the training loss every N steps."""
    eval_every: int = 0
    """Eval loss on the held-out data every N steps (0: only at the end)."""
    progress: bool = True
    """Show a progress bar with loss and tokens/s."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.halt_at_step is not None and self.halt_at_step < 1:
            raise ConfigError("bookkeeping.halt_at_step must be >= 1")
        if self.log_every < 1 or self.eval_every < 0:
            raise ConfigError("bookkeeping.log_every must be >= 1 and eval_every >= 0")


@dataclass
class SFTConfig:
    """Masked SFT on CoA trajectories (loss only on model-generated tokens)."""

    data: SFTData = field(default_factory=SFTData)
    """Training (and eval) data; ``data.train_path`` is required."""
    model: SFTModel = field(default_factory=SFTModel)
    """The model, attention and LoRA."""
    optim: SFTOptim = field(default_factory=SFTOptim)
    """Optimiser, schedule, precision, run length."""
    resources: SFTResources = field(default_factory=SFTResources)
    """Device, threads, DeepSpeed."""
    bookkeeping: SFTBookkeeping = field(default_factory=SFTBookkeeping)
    """Run directory, checkpoints, resume, logging."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.resources.deepspeed and self.optim.precision == "bf16_pure":
            raise ConfigError("with resources.deepspeed set precision in the DeepSpeed JSON; "
                              "use optim.precision bf16 or fp32")

    @property
    def effective_pack_len(self) -> int | None:
        """Tokens per packed row, or None when packing is off (one sample per row)."""
        return self.data.pack_len if self.data.packing else None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["optim"]["adam_betas"] = list(self.optim.adam_betas)
        return data


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


def _check_layout(data: dict[str, Any]) -> dict[str, Any]:
    if isinstance(data.get("model"), str):
        raise ConfigError(f"model is a section: write `model: {{path: {data['model']}}}` "
                          f"(or model.path={data['model']})")
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                values: dict[str, Any] | None = None) -> SFTConfig:
    """YAML file, then ``values`` (nested or dotted keys), then ``key=value`` overrides."""
    return _load(SFTConfig, path, overrides, values, resolve=_check_layout, moved=MOVED)
