"""Config sections the trainers share, so SFT, DPO and RL spell the same settings the same way.

``Bookkeeping`` is every trainer's; the supervised trainers (SFT, DPO) also share ``optim``
(:class:`OptimSection`), ``resources`` (:class:`DeviceSection`) and their loop's bookkeeping
(:class:`LoopBookkeeping`) and the checks of their ``data`` sections' row settings
(:func:`check_rows`); the ``model`` section is :mod:`trainers.common.model`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from coa_envs.configkit import ConfigError, check_fields

__all__ = ["Bookkeeping", "DeviceSection", "LoopBookkeeping", "OptimSection", "at_least", "check_rows"]


def at_least(section: object, prefix: str, minimum: float, names: tuple[str, ...]) -> None:
    """Refuse any of ``names`` below ``minimum``, naming the dotted key (``prefix`` + name)."""
    for name in names:
        if getattr(section, name) < minimum:
            raise ConfigError(f"{prefix}{name}={getattr(section, name)} must be >= {minimum:g}")


def check_rows(data: Any, sides: int, why: str) -> None:
    """Check a supervised ``data`` section's ``max_seq_len``, ``pack_len``, ``eval_path`` and
    ``eval_fraction``: a packed row holds ``sides`` whole sequences (SFT one sample, DPO both
    sides of a pair; ``why`` says so in the error), an unset ``pack_len`` becomes exactly that,
    and eval data is held out one way at most."""
    if data.max_seq_len < 2:
        raise ConfigError("data.max_seq_len must be at least 2")
    needed = sides * data.max_seq_len
    if data.pack_len is None:
        data.pack_len = needed
    if data.pack_len < needed:
        times = f"{sides} * " if sides > 1 else ""
        raise ConfigError(f"data.pack_len ({data.pack_len}) must be >= {times}data.max_seq_len ({needed}){why}")
    if not 0.0 <= data.eval_fraction < 1.0:
        raise ConfigError("data.eval_fraction must be in [0, 1)")
    if data.eval_path and data.eval_fraction:
        raise ConfigError("set data.eval_path or data.eval_fraction, not both")


@dataclass
class Bookkeeping:
    """Where a run writes, how often it checkpoints, and how it resumes.

    Trainers subclass it to add their own keys (SFT: logging cadence, progress bar; RL:
    periodic eval, the reward-curve plot) and to set their default ``output_dir``.
    """

    output_dir: str = "runs/train"
    """Run directory: metrics.jsonl, tensorboard/, checkpoint-<step>/, final/."""
    seed: int = 0
    """Seeds model initialisation, data order and sampling; a run is a function of it."""
    save_every: int = 0
    """Checkpoint every N steps (0: no intermediate checkpoints; the final model is still
    written)."""
    keep_checkpoints: int = 2
    """Complete checkpoints kept on disk, newest first (0 keeps all)."""
    resume: str | None = None
    """``latest`` (the newest complete checkpoint in output_dir; a fresh start when there is
    none) or a checkpoint directory. Resuming continues exactly where the checkpoint was
    written: weights, optimiser, schedule, data position and every RNG stream."""
    tensorboard: bool = True
    """Mirror metrics.jsonl to TensorBoard (when the ``tensorboard`` package is installed)."""

    def __post_init__(self) -> None:
        if isinstance(self.resume, bool):  # the RL trainer's old `resume: true`
            raise ConfigError(f"bookkeeping.resume={self.resume}: write resume: latest (or a "
                              "checkpoint directory) to resume, leave it out to start fresh")
        check_fields(self, "bookkeeping.")
        if self.save_every < 0 or self.keep_checkpoints < 0:
            raise ConfigError("bookkeeping.save_every and bookkeeping.keep_checkpoints must be "
                              ">= 0 (0: no intermediate checkpoints / keep them all)")
        if not self.output_dir:
            raise ConfigError("bookkeeping.output_dir is empty: name the run directory")


@dataclass
class OptimSection:
    """Optimiser, schedule, precision and the length of a supervised run (SFT, DPO)."""

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
class DeviceSection:
    """Where a supervised run (SFT, DPO) computes."""

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
class LoopBookkeeping(Bookkeeping):
    """Run directory, checkpoints, resume, logging and eval cadence of a supervised run."""

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
