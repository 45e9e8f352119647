"""A trainer loop's progress bar (rich): step, loss, tokens/s, time left. Main process only."""

from __future__ import annotations

from typing import Any

__all__ = ["ProgressBar"]


class ProgressBar:
    """A rich progress bar, or nothing when ``enabled`` is false (other ranks, tests)."""

    def __init__(self, *, enabled: bool, total_steps: int, initial_step: int,
                 label: str) -> None:
        self._progress: Any = None
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn(label), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.4f}"),
            TextColumn("{task.fields[tps]:,.0f} tok/s"), TimeRemainingColumn(),
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(label, total=total_steps, completed=initial_step,
                                             loss=float("nan"), tps=0.0)

    def update(self, step: int, loss: float, tokens_per_s: float) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=step, loss=loss, tps=tokens_per_s)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
