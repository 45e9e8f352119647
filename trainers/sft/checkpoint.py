"""Checkpoints that resume bit-exactly: weights, optimiser, scheduler, data position and RNG.

A checkpoint directory ``checkpoint-<step>/`` holds the model as ``save_pretrained`` writes it
(loadable on its own by inference engines) and ``trainer_state.pt`` with everything else.
The data order needs no saved state: it is a function of (seed, epoch), so the position
``(epoch, rows consumed in the epoch)`` is enough. RNG streams (python, numpy, torch CPU and
CUDA) are saved so dropout and any sampling continue exactly where they stopped.

The state file is written to a temporary name and renamed last, so a directory without it
is an interrupted save and is never resumed from.
"""

from __future__ import annotations

import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TrainerPosition", "capture_rng", "find_checkpoint", "load_state", "restore_rng",
           "rotate_checkpoints", "save_state"]

STATE_FILE = "trainer_state.pt"
_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


@dataclass(frozen=True, slots=True)
class TrainerPosition:
    """Where the loop is: optimiser steps done, and rows consumed in the current epoch."""

    step: int = 0
    epoch: int = 0
    rows_in_epoch: int = 0


def capture_rng() -> dict[str, Any]:
    import numpy as np
    import torch

    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
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


def save_state(directory: Path, *, optimizer: Any, scheduler: Any, position: TrainerPosition,
               config: dict[str, Any], extra: dict[str, Any] | None = None) -> None:
    import torch

    payload = {
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "position": {"step": position.step, "epoch": position.epoch,
                     "rows_in_epoch": position.rows_in_epoch},
        "rng": capture_rng(),
        "config": config,
        "extra": extra or {},
    }
    partial = directory / (STATE_FILE + ".tmp")
    torch.save(payload, partial)
    partial.replace(directory / STATE_FILE)


def load_state(directory: Path) -> dict[str, Any]:
    import torch

    state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=False)
    state["position"] = TrainerPosition(**state["position"])
    return state


def _checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    if not output_dir.is_dir():
        return []
    found = []
    for child in output_dir.iterdir():
        match = _CKPT_RE.match(child.name)
        if match and (child / STATE_FILE).exists():
            found.append((int(match.group(1)), child))
    return sorted(found)


def find_checkpoint(output_dir: Path, resume: str | None) -> Path | None:
    """``latest`` -> the newest complete checkpoint under ``output_dir`` (or None)."""
    if resume is None:
        return None
    if resume == "latest":
        found = _checkpoints(output_dir)
        return found[-1][1] if found else None
    path = Path(resume)
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {STATE_FILE})")
    return path


def rotate_checkpoints(output_dir: Path, keep: int | None) -> None:
    """Delete the oldest checkpoints beyond ``keep``."""
    if keep is None:
        return
    found = _checkpoints(output_dir)
    for _, path in found[: max(0, len(found) - keep)]:
        shutil.rmtree(path, ignore_errors=True)
