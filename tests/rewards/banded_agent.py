"""A scripted agent for the ``coa filter-tasks`` tests: task ``i`` of SynthHop's training split
is solved by its first ``i % 5`` samples and failed by the others, so with ``-k 4`` the pass
rates cycle 0, 1/4, 2/4, 3/4, 1 and every band's count is known in advance."""

from __future__ import annotations

import threading
from collections import Counter
from functools import cache

_lock = threading.Lock()
_played: Counter[str] = Counter()


@cache
def _tasks() -> dict[str, tuple[int, str]]:
    import gymnasium as gym

    env = gym.make("coa/SynthHop-v0", task_options={"split": "train"})
    tasks = {t.task_id: (i, t.gold[0]) for i, t in enumerate(env.unwrapped.tasks)}
    env.close()
    return tasks


def reset_counts() -> None:
    with _lock:
        _played.clear()


class Banded:
    def reset(self, observation: str, info: dict) -> None:
        index, self.gold = _tasks()[info["task_id"]]
        with _lock:
            sample = _played[info["task_id"]]
            _played[info["task_id"]] += 1
        self.right = sample < index % 5

    def act(self, observation: str, info: dict) -> str:
        return f"<think>recall</think><answer>{self.gold if self.right else 'zzqx'}</answer>"
