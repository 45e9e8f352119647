"""Crash-safe checkpoints: learner state, data cursor and RNG, written atomically.

A checkpoint is a directory ``step_000010/`` with ``learner.pt`` (policy, value head,
critic, reference, optimiser) and ``trainer_state.json`` (step, task-sampler cursor, RNG
states). It is written under a temporary name and renamed into place, so ``kill -9`` at
any moment leaves either the previous checkpoint or the new one, never a torn one;
``--resume`` picks the newest complete directory.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TaskSampler",
    "latest_checkpoint",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]

_DONE = "COMPLETE"


@dataclass
class TaskSampler:
    """Walks the task list in a fresh seeded permutation each epoch; its state is the cursor."""

    num_tasks: int
    seed: int
    epoch: int = 0
    position: int = 0
    _order: list[int] = field(default_factory=list, repr=False)

    def _permutation(self) -> list[int]:
        order = list(range(self.num_tasks))
        random.Random(f"{self.seed}:{self.epoch}").shuffle(order)
        return order

    def next(self) -> int:
        if not self._order:
            self._order = self._permutation()
        if self.position >= self.num_tasks:
            self.epoch += 1
            self.position = 0
            self._order = self._permutation()
        index = self._order[self.position]
        self.position += 1
        return index

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation()


def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(root: str | Path, step: int, learner_state: dict[str, Any],
                    trainer_state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``root/step_{step}`` atomically and prune all but the newest ``keep``."""
    import torch

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp_step_{step:06d}_{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(learner_state, tmp / "learner.pt")
    torch.save({"rng": rng_state()}, tmp / "rng.pt")
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **trainer_state}, indent=2))
    (tmp / _DONE).write_text("ok")
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    complete = sorted(p for p in root.glob("step_*") if (p / _DONE).exists())
    for old in complete[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync_dir(path: Path) -> None:
    for child in [*path.iterdir(), path] if path.is_dir() else [path]:
        try:
            fd = os.open(child, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint under ``root`` (temporary/torn ones are ignored)."""
    root = Path(root)
    if not root.is_dir():
        return None
    complete = sorted(p for p in root.glob("step_*") if (p / _DONE).exists())
    return complete[-1] if complete else None


def load_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(learner_state, trainer_state)``; also restores the process RNG states."""
    import torch

    path = Path(path)
    learner_state = torch.load(path / "learner.pt", map_location="cpu", weights_only=False)
    rng = torch.load(path / "rng.pt", map_location="cpu", weights_only=False)["rng"]
    set_rng_state(rng)
    trainer_state = json.loads((path / "trainer_state.json").read_text())
    return learner_state, trainer_state
