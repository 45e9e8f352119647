"""One checkpointer for every trainer: atomic step directories, ``latest``, rotation, RNG.

A checkpoint is ``<output_dir>/checkpoint-<step>/``: whatever the trainer writes there (SFT:
the model as ``save_pretrained`` writes it plus optimiser and scheduler; RL: the learner
state) plus ``trainer_state.json`` (step and the trainer's JSON state), ``rng.pt`` (python,
numpy, torch CPU and every CUDA device's generator) and a ``COMPLETE`` marker written last.
Everything is written under ``.tmp-checkpoint-<step>`` and renamed into place, so ``kill -9``
at any moment leaves the previous checkpoint or the new one, never a torn one; a directory
without the marker is never resumed from.

Resume is one setting in every trainer: ``resume: latest`` (the newest complete checkpoint,
or a fresh start when there is none) or ``resume: <checkpoint directory>``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Checkpointer", "TrainerPosition", "capture_rng", "restore_rng"]

_DONE = "COMPLETE"
_STATE = "trainer_state.json"
_RNG = "rng.pt"
_NAME = re.compile(r"^checkpoint-(\d+)$")


@dataclass(frozen=True, slots=True)
class TrainerPosition:
    """Where a supervised trainer's loop is (SFT, DPO): optimiser steps done, and rows
    consumed in the current epoch; saved in every checkpoint's state.

    The data order is a function of (seed, epoch) (per env, with a mixture), so this is all a
    resume needs to feed the same rows in the same order.
    """

    step: int = 0
    epoch: int = 0
    rows_in_epoch: int = 0
    streams: dict[str, list[int]] = field(default_factory=dict)
    """With a mixture of envs: each env's ``[epoch, rows taken]`` (epoch/rows_in_epoch unused)."""

    @classmethod
    def saved_in(cls, path: Path) -> TrainerPosition:
        """The position a checkpoint written with ``{"position": asdict(position)}`` holds."""
        return cls(**Checkpointer.read_state(path)["position"])


def capture_rng() -> dict[str, Any]:
    """Every random stream a training step may draw from (CUDA only when present)."""
    import numpy as np
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpointer:
    """Writes, finds, rotates and reads the ``checkpoint-<step>`` directories of one run.

    ``keep``: complete checkpoints kept after each save (0 keeps every one). ``main``: only
    the main process of a multi-process run renames, rotates and deletes.
    """

    def __init__(self, output_dir: str | Path, keep: int = 2, main: bool = True) -> None:
        self.root = Path(output_dir)
        self.keep = keep
        self.main = main

    # -- writing -----------------------------------------------------------------------
    def path(self, step: int) -> Path:
        return self.root / f"checkpoint-{step}"

    def staging(self, step: int) -> Path:
        """The temporary directory to write step ``step``'s files into (every rank may)."""
        tmp = self.root / f".tmp-checkpoint-{step}"
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp

    def commit(self, step: int, state: dict[str, Any] | None = None) -> Path:
        """Finish the staged checkpoint: RNG, JSON state, marker, fsync, rename, rotate.

        Main process only, after every rank has written its files into :meth:`staging`.
        """
        import torch

        tmp = self.staging(step)
        torch.save(capture_rng(), tmp / _RNG)
        (tmp / _STATE).write_text(json.dumps({"step": step, **(state or {})}, indent=2),
                                  encoding="utf-8")
        (tmp / _DONE).write_text("ok", encoding="utf-8")
        _fsync_tree(tmp)
        final = self.path(step)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_tree(self.root, recurse=False)
        self.rotate()
        return final

    def save(self, step: int, write: Callable[[Path], None],
             state: dict[str, Any] | None = None) -> Path:
        """One process: ``write(directory)`` puts the trainer's files in, then :meth:`commit`."""
        write(self.staging(step))
        return self.commit(step, state)

    def rotate(self) -> None:
        """Delete complete checkpoints beyond ``keep`` and stale temporary directories."""
        if not self.main:
            return
        for old in self.complete()[:-self.keep] if self.keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
        for stale in self.root.glob(".tmp-checkpoint-*"):  # left by a run killed mid-save
            shutil.rmtree(stale, ignore_errors=True)

    # -- reading -----------------------------------------------------------------------
    def complete(self) -> list[Path]:
        """Complete checkpoints, oldest first (by step number, not by name)."""
        if not self.root.is_dir():
            return []
        found = []
        for child in self.root.iterdir():
            match = _NAME.match(child.name)
            if match and (child / _DONE).exists():
                found.append((int(match.group(1)), child))
        return [path for _, path in sorted(found)]

    def latest(self) -> Path | None:
        complete = self.complete()
        return complete[-1] if complete else None

    def resolve(self, resume: str | None) -> Path | None:
        """The checkpoint a ``resume`` setting names: ``latest`` (None when there is none
        yet, so a first run and its restart share one command) or a directory."""
        if not resume:
            return None
        if resume == "latest":
            return self.latest()
        path = Path(resume)
        if not (path / _DONE).exists():
            raise FileNotFoundError(f"resume={resume}: not a complete checkpoint (no {_DONE} "
                                    f"marker); use resume=latest or a checkpoint-<step> directory")
        return path

    @staticmethod
    def read_state(path: Path) -> dict[str, Any]:
        """The JSON state saved with the checkpoint (``step`` plus the trainer's keys)."""
        return json.loads((Path(path) / _STATE).read_text(encoding="utf-8"))

    @staticmethod
    def restore_rng(path: Path) -> None:
        """Put every RNG stream back as it was when the checkpoint was written."""
        import torch

        restore_rng(torch.load(Path(path) / _RNG, map_location="cpu", weights_only=False))


def _fsync_tree(path: Path, recurse: bool = True) -> None:
    """fsync the files of ``path`` and the directory itself, so a rename is durable."""
    children = list(path.iterdir()) if recurse and path.is_dir() else []
    for child in [*children, path]:
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
