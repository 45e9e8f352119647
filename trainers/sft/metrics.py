"""Where the SFT loop's numbers go: a JSONL file, TensorBoard, and a progress bar with tokens/s.

Only the main process (rank 0) writes; other ranks get a logger that does nothing, so the
loop never branches on rank to log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger"]


class MetricsLogger:
    """Append one JSON line per logged step; mirror scalars to TensorBoard when available."""

    def __init__(self, output_dir: Path, *, enabled: bool, tensorboard: bool, progress: bool,
                 total_steps: int, initial_step: int) -> None:
        self.enabled = enabled
        self._writer: Any = None
        self._progress: Any = None
        self._task: Any = None
        if not enabled:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(output_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional (the `train` extra)
                SummaryWriter = None
            if SummaryWriter is not None:
                self._writer = SummaryWriter(str(output_dir / "tensorboard"))
        if progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("sft"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]:.4f}"),
                TextColumn("{task.fields[tps]:,.0f} tok/s"), TimeRemainingColumn(),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("sft", total=total_steps, completed=initial_step,
                                                 loss=float("nan"), tps=0.0)

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        step = int(record.get("step", 0))
        if self._writer is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float):
                    self._writer.add_scalar(f"sft/{key}", value, step)
        if self._progress is not None and "loss" in record:
            self._progress.update(self._task, completed=step, loss=record["loss"],
                                  tps=record.get("tokens_per_s", 0.0))

    def close(self) -> None:
        if not self.enabled:
            return
        self._jsonl.close()
        if self._writer is not None:
            self._writer.close()
        if self._progress is not None:
            self._progress.stop()
