"""Preference pairs from the K samples per task of an eval run (``coa pairs``).

``coa eval ENV -k K --out RUN`` plays K samples of each task; this module ranks each task's
samples and pairs a better one (*chosen*) with a worse one (*rejected*):

* rank by reward (higher first), then by length (shorter first: at equal reward the shorter
  episode is preferred as chosen and the longer one is the first rejected). Length is the
  number of generated tokens when the trajectory kept token ids, else generated characters;
* the i-th best is paired with the i-th worst, for up to ``pairs_per_task`` pairs, while the
  reward gap is at least ``min_margin`` (and always > 0): a pair never prefers one sample
  over another of the same reward, so length alone never makes a pair;
* episodes that ended in ``error:*`` (an engine timeout, a broken env) are left out: their
  reward says nothing about the model's choices.

A pair keeps both trajectories whole: their segments (generated vs observation) are the CoA
loss mask and their token ids, when the sampling policy recorded them, are what the DPO
trainer scores, so observation tokens never enter the preference log-probs.

``pairs.jsonl`` holds one :class:`PreferencePair` per line. Stdlib only.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.trajectory import Trajectory, read_trajectories, run_trajectory_file

__all__ = ["PairOptions", "PairReport", "PairsError", "PreferencePair", "build_pairs",
           "read_pairs", "read_run", "write_pairs"]


class PairsError(ValueError):
    """A run or pairs file that cannot be read; the message says what to give instead."""


@dataclass(frozen=True, slots=True)
class PairOptions:
    """How a task's samples become pairs."""

    pairs_per_task: int = 1
    """At most this many pairs per task (the i-th best with the i-th worst, disjoint)."""
    min_margin: float = 0.0
    """Smallest reward gap a pair may have (a gap of 0 never makes a pair)."""

    def __post_init__(self) -> None:
        if self.pairs_per_task < 1:
            raise PairsError(f"pairs_per_task={self.pairs_per_task}: must be >= 1")
        if self.min_margin < 0:
            raise PairsError(f"min_margin={self.min_margin}: must be >= 0")


@dataclass(frozen=True, slots=True)
class PreferencePair:
    """Two trajectories of one task: ``chosen`` scored above ``rejected``."""

    pair_id: str
    chosen: Trajectory
    rejected: Trajectory
    source: str = ""
    model: str | None = None

    @property
    def env_id(self) -> str:
        return self.chosen.env_id

    @property
    def task_id(self) -> str:
        return self.chosen.task_id

    @property
    def margin(self) -> float:
        return self.chosen.reward - self.rejected.reward

    @property
    def has_token_ids(self) -> bool:
        return self.chosen.has_token_ids and self.rejected.has_token_ids

    def to_dict(self) -> dict[str, Any]:
        return {"pair_id": self.pair_id, "env_id": self.env_id, "task_id": self.task_id,
                "reward_chosen": self.chosen.reward, "reward_rejected": self.rejected.reward,
                "source": self.source, "model": self.model,
                "chosen": self.chosen.to_dict(), "rejected": self.rejected.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PreferencePair:
        for key in ("pair_id", "chosen", "rejected"):
            if key not in data:
                raise ValueError(f"a pair needs {key!r} (keys: {sorted(data)})")
        return cls(str(data["pair_id"]), Trajectory.from_dict(data["chosen"]),
                   Trajectory.from_dict(data["rejected"]), str(data.get("source", "")),
                   data.get("model"))


@dataclass
class PairReport:
    """What went into the pairs and what was left out, for the user to check."""

    trajectories: int = 0
    tasks: int = 0
    pairs: int = 0
    pairs_with_token_ids: int = 0
    skipped_errors: int = 0
    tasks_single_sample: int = 0
    tasks_equal_rewards: int = 0
    torn_last_line: bool = False
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("trajectories read", str(self.trajectories)),
            ("tasks", str(self.tasks)),
            ("pairs written", str(self.pairs)),
            ("pairs with token ids", f"{self.pairs_with_token_ids}/{self.pairs}"),
            ("episodes left out (error:*)", str(self.skipped_errors)),
            ("tasks with < 2 usable samples", str(self.tasks_single_sample)),
            ("tasks without a reward gap", str(self.tasks_equal_rewards)),
            ("torn last line skipped", "yes" if self.torn_last_line else "no"),
        ]


def _length(trajectory: Trajectory) -> int:
    generated = [s for s in trajectory.segments if s.trainable]
    if trajectory.has_token_ids:
        return sum(len(s.token_ids) for s in generated)
    return sum(len(s.text) for s in generated)


def build_pairs(trajectories: Iterable[Trajectory], options: PairOptions | None = None, *,
                source: str = "", model: str | None = None,
                report: PairReport | None = None) -> tuple[list[PreferencePair], PairReport]:
    """Pair each task's samples (see the module docstring); tasks keep their first-seen order."""
    options = options or PairOptions()
    report = report or PairReport()
    by_task: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for trajectory in trajectories:
        report.trajectories += 1
        if trajectory.status.is_error:
            report.skipped_errors += 1
            continue
        by_task[(trajectory.env_id, trajectory.task_id)].append(trajectory)
    report.tasks = len(by_task)
    pairs: list[PreferencePair] = []
    for (env_id, task_id), samples in by_task.items():
        if len(samples) < 2:
            report.tasks_single_sample += 1
            continue
        best = sorted(samples, key=lambda t: (-t.reward, _length(t), t.sample_index))
        worst = sorted(samples, key=lambda t: (t.reward, -_length(t), t.sample_index))
        made = 0
        for better, poorer in zip(best[:len(samples) // 2], worst[:len(samples) // 2],
                                  strict=True):
            gap = better.reward - poorer.reward
            if made >= options.pairs_per_task or gap <= 0 or gap < options.min_margin:
                break
            pair_id = f"{env_id}/{task_id}/{better.sample_index}>{poorer.sample_index}"
            pairs.append(PreferencePair(pair_id, better, poorer, source, model))
            made += 1
        if not made:
            report.tasks_equal_rewards += 1
    report.pairs = len(pairs)
    report.pairs_with_token_ids = sum(p.has_token_ids for p in pairs)
    return pairs, report


def _trajectory_file(run: Path) -> Path:
    try:
        return run_trajectory_file(run, "`coa eval ENV -k K --out DIR` writes one; K >= 2 samples per task make pairs")
    except FileNotFoundError as error:
        raise PairsError(str(error)) from None


def _lines(path: Path) -> int:
    """Non-empty lines of a file (read_trajectories yields one trajectory per line, except a
    torn last line, which it skips)."""
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def read_run(run: str | Path, report: PairReport | None = None
             ) -> tuple[list[Trajectory], str | None, PairReport]:
    """The trajectories of an eval run (directory or its JSONL file) and the model that
    sampled them (``summary.json``'s ``model``, when there is one)."""
    run = Path(run)
    report = report or PairReport()
    path = _trajectory_file(run)
    try:
        trajectories = list(read_trajectories(path))
    except ValueError as error:  # a broken line before the last, or not trajectories at all
        raise PairsError(f"{error}; is {path} a trajectory JSONL file (coa eval writes one)? "
                         "a line cut short in the middle of the file means the file was "
                         "damaged: re-run coa eval with --resume to rewrite it") from None
    except UnicodeDecodeError as error:
        raise PairsError(f"{path} is not a UTF-8 text file: {error}") from None
    except (TypeError, KeyError) as error:
        raise PairsError(f"{path}: a line is not a trajectory ({error})") from None
    if _lines(path) != len(trajectories):
        report.torn_last_line = True
        report.notes.append(f"{path}: the last line is cut short (a writer stopped mid-line); "
                            "it was skipped")
    model = None
    summary = (run if run.is_dir() else run.parent) / "summary.json"
    if summary.is_file():
        try:
            model = json.loads(summary.read_text(encoding="utf-8")).get("model")
        except (ValueError, AttributeError):
            model = None
    return trajectories, model, report


def write_pairs(path: str | Path, pairs: Sequence[PreferencePair]) -> Path:
    """Write ``pairs.jsonl`` atomically (a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.part{os.getpid()}")
    with open(partial, "w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(json.dumps(pair.to_dict(), ensure_ascii=False) + "\n")
    os.replace(partial, path)
    return path


def read_pairs(path: str | Path) -> list[PreferencePair]:
    """Every pair of a ``pairs.jsonl``; any unreadable line is an error naming file and line
    (a pairs file is written atomically, so a cut line means damage, not a crash)."""
    path = Path(path)
    if not path.is_file():
        raise PairsError(f"{path} does not exist: make it with `coa pairs RUN_DIR --out {path}`")
    pairs: list[PreferencePair] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                pair = PreferencePair.from_dict(json.loads(line))
            except json.JSONDecodeError:
                raise PairsError(f"{path}:{number}: not a complete JSON line (cut short?); "
                                 "rebuild the file with `coa pairs`") from None
            except (TypeError, ValueError, AttributeError) as error:
                raise PairsError(f"{path}:{number}: not a preference pair: {error}") from None
            if pair.pair_id in seen:
                raise PairsError(f"{path}:{number}: pair_id {pair.pair_id!r} appears twice")
            seen.add(pair.pair_id)
            pairs.append(pair)
    if not pairs:
        raise PairsError(f"{path} holds no pairs")
    return pairs
