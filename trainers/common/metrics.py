"""One metrics logger for every trainer: ``metrics.jsonl`` (the source of truth) + TensorBoard.

One JSON object per logged step, flushed at once, so a ``kill -9`` loses at most the line
being written (:func:`read_metrics` skips a torn last line). A fresh run starts a new file;
a resumed run keeps the lines up to the checkpoint's step and drops the rest, so a step
replayed after the resume is logged once. TensorBoard (the ``train`` extra) mirrors the
numeric values when it is installed and enabled. Only the main process of a multi-process
run writes: other ranks get ``enabled=False`` and every call is a no-op.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "read_metrics"]


class MetricsLogger:
    """Append step records to ``<output_dir>/metrics.jsonl`` (and TensorBoard).

    ``resume_step``: None starts the file afresh; a step keeps the records up to it.
    ``tag_prefix`` goes before every TensorBoard tag (``sft/loss``); JSONL keys stay bare.
    """

    def __init__(self, output_dir: str | Path, *, tensorboard: bool = True,
                 resume_step: int | None = None, enabled: bool = True,
                 tag_prefix: str = "") -> None:
        self.enabled = enabled
        self.tag_prefix = tag_prefix
        self._writer: Any = None
        if not enabled:
            return
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        if resume_step is None:
            self.path.unlink(missing_ok=True)
        elif self.path.exists():
            kept = [row for row in read_metrics(self.path) if int(row.get("step", 0)) <= resume_step]
            self.path.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - long-lived
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is in the `train` extra; JSONL still works
                SummaryWriter = None
            if SummaryWriter is not None:
                self._writer = SummaryWriter(str(self.dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **metrics}
        self._handle.write(json.dumps(record) + "\n")
        self._handle.flush()
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    self._writer.add_scalar(f"{self.tag_prefix}{key}", float(value), step)
            self._writer.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self._handle.close()
        if self._writer is not None:
            self._writer.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``; a torn line (a crash mid-write) is skipped."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
