"""The run around a supervised trainer's loop (SFT, DPO): resume, optimiser, logs, checkpoints.

Both trainers read a :class:`~trainers.common.supervised_config.SupervisedConfig` (``model``,
``optim``, ``resources``, ``bookkeeping``) and do the same around their
own step: find the checkpoint to resume (``bookkeeping.resume``), rebuild the optimiser and
its schedule with their saved state and the loop's :class:`TrainerPosition`, restore every RNG
stream last, log each step to ``metrics.jsonl`` and the progress bar, write a checkpoint
(weights as inference engines load them, optimiser state, position, config) and the final
model. :class:`SupervisedRun` is that, once; each trainer's module keeps only its step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.common.checkpoint import Checkpointer, TrainerPosition
from trainers.common.loading import save_for_inference
from trainers.common.metrics import MetricsLogger
from trainers.common.optim import load_optimizer_state, make_optimizer, make_schedule, save_optimizer_state
from trainers.common.progress import ProgressBar
from trainers.common.supervised_config import SupervisedConfig

__all__ = ["SupervisedResult", "SupervisedRun", "run_supervised"]


@dataclass(frozen=True, slots=True)
class SupervisedResult:
    """What a supervised run produced; each trainer's result adds its own series."""

    output_dir: Path
    final_dir: Path | None
    """``final/`` (the trained model); None when the run halted at ``bookkeeping.halt_at_step``."""
    steps: int
    losses: tuple[float, ...]
    """The loss of every step."""


def run_supervised(config: SupervisedConfig, run: Callable[[Any], Any]) -> Any:
    """``run(config).train()`` with the torch threads ``resources.torch_threads`` asks for."""
    from trainers.common.threads import torch_threads

    with torch_threads(config.resources.torch_threads):
        return run(config).train()


class SupervisedRun:
    """One run's bookkeeping. ``label`` names its logs (``sft``, ``dpo``); ``main`` is false on
    every rank but the first of a multi-process run (they write nothing but their own shards)."""

    def __init__(self, config: SupervisedConfig, *, label: str, main: bool = True) -> None:
        book = config.bookkeeping
        self.config, self.label, self.main = config, label, main
        self.output_dir = Path(book.output_dir)
        self.checkpoints = Checkpointer(self.output_dir, keep=book.keep_checkpoints, main=main)
        self.checkpoint = self.checkpoints.resolve(book.resume)
        self.position = TrainerPosition.saved_in(self.checkpoint) if self.checkpoint else TrainerPosition()
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.logger: MetricsLogger | None = None
        self.progress: ProgressBar | None = None

    @property
    def source(self) -> str | None:
        """The checkpoint directory weights and tokenizer are resumed from, if any."""
        return str(self.checkpoint) if self.checkpoint is not None else None

    def optimise(self, model: Any, device: Any, total_steps: int, *, saved_state: bool = True) -> None:
        """AdamW and its cosine schedule over ``model``, with a resumed run's state unless the
        state lives elsewhere (``saved_state=False``: DeepSpeed keeps its own)."""
        optim = self.config.optim
        self.optimizer = make_optimizer(optim, model, device)
        self.scheduler = make_schedule(optim, self.optimizer, total_steps)
        if self.checkpoint is not None and saved_state:
            load_optimizer_state(self.checkpoint, self.optimizer, self.scheduler)

    def begin(self, total_steps: int) -> None:
        """Open the metrics log and the progress bar, then restore the RNG streams: last, so
        nothing set up before the loop draws from the restored streams."""
        book = self.config.bookkeeping
        resumed = self.position.step if self.checkpoint is not None else None
        self.logger = MetricsLogger(self.output_dir, enabled=self.main, tensorboard=book.tensorboard,
                                    resume_step=resumed, tag_prefix=f"{self.label}/")
        self.progress = ProgressBar(enabled=self.main and book.progress, total_steps=total_steps,
                                    initial_step=self.position.step, label=self.label)
        if self.checkpoint is not None:
            self.checkpoints.restore_rng(self.checkpoint)

    def step_optimizer(self) -> None:
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def log(self, metrics: dict[str, float], *, loss: float, tokens_per_s: float, total_steps: int) -> None:
        """Log the step just taken every ``bookkeeping.log_every`` steps and at the last one."""
        step = self.position.step
        if step % self.config.bookkeeping.log_every == 0 or step == total_steps:
            assert self.logger is not None and self.progress is not None
            self.logger.log(step, {**metrics, "lr": self.scheduler.get_last_lr()[0]})
            self.progress.update(step, loss, tokens_per_s)

    def due(self, every: int) -> bool:
        return bool(every) and self.position.step % every == 0

    @property
    def halted(self) -> bool:
        """``bookkeeping.halt_at_step`` reached: checkpoint and stop (tests of resume)."""
        halt = self.config.bookkeeping.halt_at_step
        return halt is not None and self.position.step >= halt

    def save(self, model: Any, tokenizer: Any, *, write: Callable[[Path], None] | None = None,
             full_weights: AbstractContextManager[Any] | None = None, optimizer_state: bool = True,
             barrier: Callable[[], None] = lambda: None) -> None:
        """Checkpoint the current step: inference weights (main process, inside
        ``full_weights`` when shards must be gathered), optimiser state, ``write(directory)``
        for the trainer's own files, then the position and config, committed atomically."""
        step, staging = self.position.step, self.checkpoints.staging(self.position.step)
        if write is not None:
            write(staging)
        with full_weights or nullcontext():
            if self.main:
                save_for_inference(model, tokenizer, staging, attention=self.config.model.attention)
        if self.main and optimizer_state:
            save_optimizer_state(staging, self.optimizer, self.scheduler)
        barrier()
        if self.main:
            self.checkpoints.commit(step, {"position": dataclasses.asdict(self.position),
                                           "config": self.config.to_dict()})
        barrier()

    def save_final(self, model: Any, tokenizer: Any,
                   full_weights: AbstractContextManager[Any] | None = None) -> Path:
        """``final/``: the trained model as inference loads it (a LoRA adapter merged in when
        ``model.merge_lora_on_save``)."""
        spec, final_dir = self.config.model, self.output_dir / "final"
        with full_weights or nullcontext():
            if self.main:
                save_for_inference(model, tokenizer, final_dir, attention=spec.attention,
                                   merge_lora=spec.lora.enabled and spec.merge_lora_on_save)
        return final_dir

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()
        if self.progress is not None:
            self.progress.close()
