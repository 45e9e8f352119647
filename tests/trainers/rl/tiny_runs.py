"""What the CPU tests of the RL loop share: a tiny run's config, its weights and its metrics.

The run: a fresh tiny model (random weights, which earn no reward; the entropy bonus still moves
them every step, so a resumed run that restored anything wrongly ends with different weights)
playing easy SynthHop tasks for 4 DAPO steps, in this process (no Ray), with a checkpoint and
an eval every 2 steps. A test changes it with layers merged on top (dotted keys allowed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.common import deep_merge
from trainers.rl.config import RLConfig, load_config

__all__ = ["SYNTHHOP_KWARGS", "TaskOrder", "final_weights", "metric_rows", "tiny_run_config"]

SYNTHHOP_KWARGS = {"task_options": {"difficulty": "easy", "num_tasks": 16},
                   "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}},
                   "system_prompt": "Search the wiki, then answer."}


def tiny_run_config(out: Path, *layers: Mapping[str, Any], **overrides: Any) -> RLConfig:
    """The tiny run writing to ``out``, with ``layers`` then ``overrides`` merged over it."""
    values: dict[str, Any] = {
        "algorithm": {"name": "dapo", "total_steps": 4, "prompts_per_step": 2, "group_size": 2,
                      "minibatch_size": 4, "lr": 1e-3, "dynamic_sampling": False,
                      "entropy_coef": 0.01},
        "model": {"path": "tiny", "config_overrides": {"hidden_size": 32, "layers": 1}},
        "env": {"id": "coa/SynthHop-v0", "kwargs": SYNTHHOP_KWARGS, "max_turns": 2},
        "rollout": {"max_new_tokens": 8, "max_response_tokens": 48},
        "resources": {"use_ray": False, "torch_threads": 1, "micro_batch_size": 2},
        "bookkeeping": {"save_every": 2, "output_dir": str(out), "tensorboard": False,
                        "plot": False, "eval_every": 2, "eval_episodes": 4},
    }
    for layer in (*layers, overrides):
        values = deep_merge(values, layer)
    return load_config(values=values)


def final_weights(directory: Path) -> dict[str, Any]:
    """Every tensor of the safetensors files in ``directory`` (a run's ``final/``)."""
    from safetensors.torch import load_file

    state: dict[str, Any] = {}
    for path in sorted(directory.glob("*.safetensors")):
        state.update(load_file(str(path)))
    assert state, f"no weights in {directory}"
    return state


def metric_rows(out: Path) -> list[dict[str, Any]]:
    """The rows a run logged to ``<out>/metrics.jsonl``, in order."""
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


class TaskOrder:
    """A task source for ``collect_groups`` that hands out fixed task indices in order."""

    def __init__(self, *order: int) -> None:
        self.order = list(order)

    def next(self) -> int:
        return self.order.pop(0)

    def state_dict(self) -> dict[str, Any]:
        return {}
