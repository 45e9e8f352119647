"""Replay agent: plays back the action texts of recorded trajectories (JSONL).

Useful to re-score old runs after a reward change, or to rerun a recorded episode through
a newer env version. Trajectories are matched to episodes by task id.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from agents.trajectory import read_trajectories

__all__ = ["ReplayAgent"]


class ReplayAgent:
    def __init__(self, path: str | Path):
        self.by_task: dict[str, list[list[str]]] = defaultdict(list)
        for trajectory in read_trajectories(path):
            actions = [s.text for s in trajectory.segments if s.kind == "generated"]
            self.by_task[trajectory.task_id].append(actions)
        if not self.by_task:
            raise ValueError(f"{path} holds no trajectories to replay")
        self._script: list[str] = []

    @property
    def task_ids(self) -> list[str]:
        return list(self.by_task)

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        recordings = self.by_task.get(info["task_id"])
        if not recordings:
            raise KeyError(f"no recorded trajectory for task {info['task_id']!r}")
        # Several recordings of one task (samples) are replayed in order.
        self._script = list(recordings.pop(0))
        if not recordings:
            recordings.append(list(self._script))

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self._script.pop(0) if self._script else ""
