"""Distillation: keep the teacher trajectories the reward accepts and write them as SFT data.

CoA's SFT data is distilled: a strong teacher (a multi-agent system, a large model behind an
OpenAI-compatible endpoint, the oracle for a demo) plays the envs, and only the episodes the
verifiable reward accepts become training data. Playing is :mod:`agents.rollout`'s job
(``coa eval ENV --agent … -k K --out DIR`` records every episode, with its reward, status,
tool errors and, for a sampling policy, its exact token ids); this module is the other half:
read one or more such runs, drop what must not be learned from, and write one JSONL file that
:mod:`trainers.data` reads as it is.

What is dropped, and why:

* a reward below ``min_reward``: the point of distilling against a verifier;
* an episode that did not end with an answer (truncated, engine error, timeout): its last turn
  is not a finished solution;
* a malformed action the env had to correct (``tool_errors["action"]``): SFT would teach the
  format error along with the recovery (``allow_bad_actions`` keeps them);
* the same generated text for the same task twice (K samples of a greedy teacher);
* more than ``max_per_task`` accepted episodes of one task, so easy tasks do not dominate; the
  kept ones are the shortest (fewest turns, then fewest generated characters) or the first.

The teacher's token ids are dropped unless ``keep_token_ids``: they are ids of the teacher's
vocabulary, and a student with another tokenizer must re-tokenise the text (the SFT loader
trusts ids when a record has them). Keep them only when student and teacher share a tokenizer.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DistillReport", "distill", "rejection_reason"]

_PREFERENCES = ("shortest", "first")


@dataclass
class DistillReport:
    """What a distillation read and kept; written beside the data as ``<out>.report.json``."""

    read: int = 0
    kept: int = 0
    tasks_seen: int = 0
    tasks_kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return self.kept / self.read if self.read else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "acceptance_rate": round(self.acceptance_rate, 4)}


def rejection_reason(trajectory: Any, min_reward: float, allow_bad_actions: bool = False) -> str | None:
    """Why ``trajectory`` must not be training data, or ``None`` when it may be."""
    if not trajectory.segments or not trajectory.response_text.strip():
        return "no_generation"
    if trajectory.status != "ok" or not trajectory.terminated:
        return "not_finished"
    if not allow_bad_actions and trajectory.tool_errors.get("action", 0):
        return "bad_action"
    if trajectory.reward < min_reward:
        return "below_reward"
    return None


def _trajectory_files(run: Path) -> Iterator[Path]:
    if run.is_dir():
        found = run / "trajectories.jsonl"
        if not found.exists():
            raise FileNotFoundError(f"{run} holds no trajectories.jsonl (write one with `coa eval ... --out {run}`)")
        yield found
    elif run.exists():
        yield run
    else:
        raise FileNotFoundError(f"teacher run not found: {run}")


def _generated_texts(trajectory: Any) -> tuple[str, ...]:
    return tuple(segment.text for segment in trajectory.segments if segment.trainable)


def _drop_token_ids(trajectory: Any) -> None:
    trajectory.prompt_ids = []
    for segment in trajectory.segments:
        segment.token_ids, segment.logprobs = [], []


def distill(
    runs: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    min_reward: float = 1.0,
    max_per_task: int = 1,
    prefer: str = "shortest",
    allow_bad_actions: bool = False,
    keep_token_ids: bool = False,
) -> DistillReport:
    """Filter the trajectories of ``runs`` (``coa eval`` output dirs or JSONL files) into ``out``.

    ``max_per_task`` 0 keeps every accepted, distinct episode. The data file and its report
    are written under temporary names and renamed, so an interrupted run leaves nothing that
    looks complete.
    """
    from agents.trajectory import read_trajectories, write_trajectory

    if prefer not in _PREFERENCES:
        raise ValueError(f"prefer={prefer!r} is not valid; allowed: {list(_PREFERENCES)}")
    if max_per_task < 0:
        raise ValueError("max_per_task must be >= 0 (0 keeps every accepted episode)")
    report = DistillReport()
    dropped: Counter[str] = Counter()
    accepted: dict[tuple[str, str], list[tuple[tuple[int, int, int], Any]]] = defaultdict(list)
    seen_texts: set[tuple[str, str, tuple[str, ...]]] = set()
    tasks: set[tuple[str, str]] = set()
    order = 0
    for run in runs:
        for path in _trajectory_files(Path(run)):
            for trajectory in read_trajectories(path):
                report.read += 1
                report.sources[str(path)] = report.sources.get(str(path), 0) + 1
                task = (trajectory.env_id, trajectory.task_id)
                tasks.add(task)
                reason = rejection_reason(trajectory, min_reward, allow_bad_actions)
                texts = _generated_texts(trajectory)
                if reason is None and (*task, texts) in seen_texts:
                    reason = "duplicate"
                if reason is not None:
                    dropped[reason] += 1
                    continue
                seen_texts.add((*task, texts))
                generated_chars = sum(map(len, texts))
                rank = (trajectory.num_turns, generated_chars) if prefer == "shortest" else (0, 0)
                accepted[task].append(((*rank, order), trajectory))
                order += 1
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(f".{out_path.name}.part{os.getpid()}")
    report_path = out_path.with_name(out_path.name + ".report.json")
    report_partial = report_path.with_name(f".{report_path.name}.part{os.getpid()}")
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            for task in sorted(accepted):
                ranked = sorted(accepted[task], key=lambda item: item[0])
                keep = ranked if max_per_task == 0 else ranked[:max_per_task]
                dropped["over_task_cap"] += len(ranked) - len(keep)
                for _, trajectory in keep:
                    if not keep_token_ids:
                        _drop_token_ids(trajectory)
                    write_trajectory(handle, trajectory)
                    report.kept += 1
        report.tasks_seen = len(tasks)
        report.tasks_kept = len(accepted)
        report.dropped = {reason: count for reason, count in sorted(dropped.items()) if count}
        report_partial.write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
        report_path.unlink(missing_ok=True)  # never an old report beside new data
        partial.replace(out_path)
        report_partial.replace(report_path)
    finally:
        partial.unlink(missing_ok=True)
        report_partial.unlink(missing_ok=True)
    return report
