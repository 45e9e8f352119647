"""The SFT trainer's configuration: one dataclass, loadable from YAML, overridable by key=value.

Validation lives in ``__post_init__`` and says what to change, so a bad combination fails
before any model is loaded. Stdlib + PyYAML only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["SFTConfig", "load_config", "parse_overrides"]

_PRECISIONS = ("fp32", "bf16", "bf16_pure")
_TRUNCATION = ("drop", "truncate_right", "error")
_ATTENTION = ("varlen", "segment_sdpa", "sdpa", "eager", "flex_attention", "flash_attention_2")
_TINY_DEFAULTS = {"vocab_size": 512, "hidden_size": 64, "layers": 2, "heads": 4, "kv_heads": 2}


@dataclass
class SFTConfig:
    """Masked SFT on CoA trajectories (loss only on model-generated tokens)."""

    # -- model ------------------------------------------------------------------------
    model: str = "tiny"
    """``tiny`` (a small Qwen2 built from ``tiny`` with a tokenizer trained on the data), or a
    local directory / HF id for ``from_pretrained``."""
    tokenizer: str | None = None
    """Tokenizer path/id when it differs from ``model``."""
    tiny: dict[str, Any] = field(default_factory=lambda: dict(_TINY_DEFAULTS))
    """Sizes for ``model: tiny``: vocab_size, hidden_size, layers, heads, kv_heads, ..."""
    attention: str = "varlen"
    """How packed rows attend: ``varlen`` (per-sample; torch's varlen kernel on CUDA),
    ``segment_sdpa``, or a transformers implementation (``sdpa``, ``eager``, ...)."""
    lora: dict[str, Any] | None = None
    """LoRA via peft, e.g. ``{r: 16, alpha: 32, dropout: 0.05, target_modules: all-linear}``."""
    merge_lora_on_save: bool = True
    """Write the final model with the adapter merged, so plain ``from_pretrained`` loads it."""

    # -- data -------------------------------------------------------------------------
    train_path: str = ""
    """Trajectory JSONL, or the seed's ShareGPT/messages/alpaca JSON(L); file or directory."""
    data_format: str = "auto"
    eval_path: str | None = None
    eval_fraction: float = 0.0
    """Hold out this share of ``train_path`` samples for eval when ``eval_path`` is unset."""
    generate: dict[str, Any] | None = None
    """Make ``train_path`` when it is missing: ``{env_id: coa/SynthHop-v0, agent: oracle,
    n: 300, seed: 0}`` runs the agent through the env and writes trajectories."""
    min_reward: float | None = None
    """Keep only trajectories whose reward is at least this (rejection sampling)."""
    max_seq_len: int = 2048
    truncation: str = "truncate_right"
    """``drop`` | ``truncate_right`` | ``error`` for samples longer than ``max_seq_len``."""
    packing: bool = True
    pack_len: int | None = None
    """Tokens per packed row (= one micro-batch); defaults to ``max_seq_len``."""

    # -- optimisation -----------------------------------------------------------------
    precision: str = "fp32"
    """``fp32``; ``bf16`` (autocast, fp32 master weights); ``bf16_pure`` (bf16 weights)."""
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float = 1.0
    warmup_ratio: float = 0.0
    warmup_steps: int | None = None
    """Overrides ``warmup_ratio`` when set."""
    num_epochs: int = 1
    max_steps: int | None = None
    """Total optimiser steps; overrides ``num_epochs`` when set."""
    grad_accum: int = 1
    """Packed rows per optimiser step (per process)."""
    gradient_checkpointing: bool = False
    chunked_loss: bool = True
    """Compute the LM head and loss only on trained positions, in chunks (saves memory)."""
    deepspeed: str | None = None
    """Path to a DeepSpeed JSON config (ZeRO-2/3); needs the ``deepspeed`` package."""

    # -- bookkeeping ------------------------------------------------------------------
    output_dir: str = "runs/sft"
    save_every: int = 0
    """Checkpoint every N optimiser steps (0: only at the end)."""
    save_total_limit: int | None = None
    resume: str | None = None
    """``latest`` or a checkpoint directory to resume from bit-exactly."""
    halt_at_step: int | None = None
    """Stop (after checkpointing) at this step without changing the schedule; for tests."""
    log_every: int = 1
    eval_every: int = 0
    tensorboard: bool = True
    progress: bool = True
    seed: int = 0
    device: str = "auto"
    torch_threads: int = 0
    """CPU threads for torch (0: torch's default). On a shared CPU one thread can be several
    times faster than two: OpenMP workers spin-wait for a core another process holds."""

    def __post_init__(self) -> None:
        self.adam_betas = tuple(float(b) for b in self.adam_betas)  # type: ignore[assignment]
        if self.precision not in _PRECISIONS:
            raise ValueError(f"precision must be one of {_PRECISIONS}, not {self.precision!r}")
        if self.truncation not in _TRUNCATION:
            raise ValueError(f"truncation must be one of {_TRUNCATION}, not {self.truncation!r}")
        if self.attention not in _ATTENTION:
            raise ValueError(f"attention must be one of {_ATTENTION}, not {self.attention!r}")
        if not self.train_path:
            raise ValueError("train_path is required (a trajectory JSONL or SFT JSON file)")
        if self.max_seq_len < 2:
            raise ValueError("max_seq_len must be at least 2")
        if self.pack_len is not None and self.pack_len < self.max_seq_len:
            raise ValueError(f"pack_len ({self.pack_len}) must be >= max_seq_len "
                             f"({self.max_seq_len}) or every long sample would be unpackable")
        if self.grad_accum < 1 or self.num_epochs < 1:
            raise ValueError("grad_accum and num_epochs must be >= 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError("max_steps must be >= 1 (or unset to train num_epochs)")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError("eval_fraction must be in [0, 1)")
        if self.eval_path and self.eval_fraction:
            raise ValueError("set eval_path or eval_fraction, not both")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError("warmup_ratio must be in [0, 1)")
        if self.learning_rate <= 0:
            raise ValueError("learning_rate must be > 0")
        if self.model == "tiny" and self.tokenizer:
            raise ValueError("model: tiny trains its own tokenizer; drop `tokenizer`")
        if self.deepspeed and self.precision == "bf16_pure":
            raise ValueError("with deepspeed set precision in the DeepSpeed JSON; use bf16 or fp32")
        if self.torch_threads < 0:
            raise ValueError("torch_threads must be >= 0 (0 keeps torch's default)")
        if self.halt_at_step is not None and self.halt_at_step < 1:
            raise ValueError("halt_at_step must be >= 1")

    @property
    def effective_pack_len(self) -> int | None:
        if not self.packing:
            return None
        return self.pack_len or self.max_seq_len

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["adam_betas"] = list(self.adam_betas)
        return data


def _coerce(value: str) -> Any:
    """Parse a command-line value as YAML (numbers, bools, null, lists, dicts) or keep text."""
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["lr=1e-4", "tiny.layers=4"]`` -> nested dict; dotted keys reach into dict fields."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"override {pair!r} is not key=value")
        key, value = pair.split("=", 1)
        node = out
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = _coerce(value)
    return out


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                **values: Any) -> SFTConfig:
    """YAML file, then keyword values, then ``key=value`` overrides (last wins).

    Relative data and output paths in a YAML file stay relative to the working directory
    (as a user typing them on the command line would expect).
    """
    data: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: the top level must be a mapping of config keys")
        data = loaded
    data = _merge(data, values)
    data = _merge(data, parse_overrides(overrides or []))
    known = {f.name for f in dataclasses.fields(SFTConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown SFT config keys: {unknown}; known keys: {sorted(known)}")
    if "tiny" in data:
        data["tiny"] = {**_TINY_DEFAULTS, **(data["tiny"] or {})}
    return SFTConfig(**data)
