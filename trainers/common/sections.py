"""Config sections every trainer shares, so SFT and RL spell run bookkeeping the same way."""

from __future__ import annotations

from dataclasses import dataclass

from trainers.common.config import ConfigError, check_fields

__all__ = ["Bookkeeping", "at_least"]


def at_least(section: object, prefix: str, minimum: float, names: tuple[str, ...]) -> None:
    """Refuse any of ``names`` below ``minimum``, naming the dotted key (``prefix`` + name)."""
    for name in names:
        if getattr(section, name) < minimum:
            raise ConfigError(f"{prefix}{name}={getattr(section, name)} must be >= {minimum:g}")


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
