"""``distill``: teacher runs in, the trajectories worth learning from out, with a stage report.

CoA's SFT data is distilled: a teacher (a multi-agent system run with ``coa teach``, a large
model or any agent run with ``coa eval``) plays the envs, and only the episodes that pass a
chain of filters become training data. Each stage sees what the previous one let through, and
the report counts, per stage, how many trajectories went in and out and why the others left:

=============  ==========================================================================
convert        a teacher run's agent log becomes role spans of one CoA trajectory
correct        finished with an answer; reward >= ``min_reward``
format         every turn a valid CoA action; no env-corrected malformed action
leakage        the answer was not in the question or metadata, nor known before evidence
dedup          the same generated text for the same task once
limits         at most ``max_turns`` actions and ``max_chars`` characters
diversity      at least ``min_tools`` tools and ``min_roles`` role span kinds
replay         a fresh env given the same actions returns the same observations and reward
select         ``max_per_task`` per task and ``budget`` in all, best first (``prefer``)
=============  ==========================================================================

(:mod:`trainers.distill.filters`, :mod:`~trainers.distill.replay` and
:mod:`~trainers.distill.rank` say why each rule is what it is.) Replay runs after the cheap
stages, on every trajectory still in the running, so each kept one has been replayed.

The teacher's token ids are dropped unless ``keep_token_ids``: they are ids of the teacher's
vocabulary, and a student with another tokenizer must re-tokenise the text (the SFT loader
trusts ids when a record has them).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainers.distill import filters
from trainers.distill.convert import ConversionError, convert
from trainers.distill.export import to_sharegpt
from trainers.distill.rank import PREFERENCES, Candidate, select
from trainers.distill.replay import EnvPool, replay_reason

__all__ = ["STAGES", "DistillConfig", "DistillReport", "distill"]

STAGES = ("convert", "correct", "format", "leakage", "dedup", "limits", "diversity", "replay", "select")


@dataclass(frozen=True, slots=True)
class DistillConfig:
    """Every knob of the filter chain (see the module docstring for the stages)."""

    min_reward: float = 1.0
    """Keep episodes whose reward is at least this."""
    allow_bad_actions: bool = False
    """Keep episodes with a malformed action the env corrected."""
    leak_check: bool = True
    """Drop answers given away by the question, metadata, or known before evidence."""
    max_turns: int = 26
    """At most this many actions (AFM's web budget: 25 tool turns and the answer); 0 = no limit."""
    max_chars: int = 131_072
    """At most this many response characters (about 32k tokens at ~4 characters a token); 0 = no limit."""
    min_tools: int = 1
    """At least this many distinct tools called."""
    min_roles: int = 1
    """At least this many distinct role span kinds (think, plan, reflection, ...)."""
    replay: bool = True
    """Replay every candidate through a fresh env and keep it only if all matches."""
    make_kwargs: dict[str, Any] = field(default_factory=dict)
    """``gym.make`` options for replaying records that do not carry their own (``coa eval`` runs)."""
    max_per_task: int = 1
    """Kept trajectories per task; 0 keeps every distinct accepted one."""
    budget: int = 0
    """Kept trajectories in all; 0 = no cap."""
    prefer: str = "quality"
    """Which to keep under the caps: quality | shortest | first."""
    keep_token_ids: bool = False
    """Keep the teacher's token ids (only if the student shares its tokenizer)."""

    def __post_init__(self) -> None:
        if self.prefer not in PREFERENCES:
            raise ValueError(f"prefer={self.prefer!r} is not valid; allowed: {list(PREFERENCES)}")
        for name in ("max_per_task", "budget", "max_turns", "max_chars", "min_tools", "min_roles"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


@dataclass
class DistillReport:
    """What a distillation read and kept; written beside the data as ``<out>.report.json``."""

    read: int = 0
    kept: int = 0
    tasks_seen: int = 0
    tasks_kept: int = 0
    stages: list[dict[str, Any]] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return self.kept / self.read if self.read else 0.0

    def survival(self) -> list[tuple[str, int]]:
        """``[("read", n), (stage, survivors), ...]`` — the progressive funnel."""
        return [("read", self.read), *((stage["stage"], stage["out"]) for stage in self.stages)]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "acceptance_rate": round(self.acceptance_rate, 4)}


def _drop_token_ids(trajectory: Any) -> None:
    trajectory.prompt_ids = []
    for segment in trajectory.segments:
        segment.token_ids, segment.logprobs = [], []


class _Stages:
    """Runs the trajectories through the stages in order, counting survivors and reasons."""

    def __init__(self, report: DistillReport):
        self.report = report

    def run(self, name: str, items: list[Any], reason: Callable[[Any], str | None]) -> list[Any]:
        survivors, dropped = [], Counter[str]()
        for item in items:
            why = reason(item)
            if why is None:
                survivors.append(item)
            else:
                dropped[why] += 1
        self.record(name, len(items), len(survivors), dropped)
        return survivors

    def record(self, name: str, entered: int, left: int, dropped: dict[str, int]) -> None:
        counts = {why: count for why, count in sorted(dropped.items()) if count}
        self.report.stages.append({"stage": name, "in": entered, "out": left, "dropped": counts})
        for why, count in counts.items():
            self.report.dropped[why] = self.report.dropped.get(why, 0) + count


def _write_atomically(path: Path, lines: Iterable[str]) -> Path:
    """Write under a temporary name; the caller renames it into place when all is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.part{os.getpid()}")
    with open(partial, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")
    return partial


def distill(
    runs: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    config: DistillConfig | None = None,
    *,
    sharegpt_out: str | os.PathLike[str] | None = None,
    **options: Any,
) -> DistillReport:
    """Filter the trajectories of ``runs`` (``coa teach``/``coa eval`` dirs or JSONL files) into
    ``out`` (trajectory JSONL) and, if given, ``sharegpt_out`` (the seed's SFT format).

    ``options`` are :class:`DistillConfig` fields (``distill(runs, out, min_reward=0.5)``). The
    files and the report are written under temporary names and renamed, so an interrupted run
    leaves nothing that looks complete.
    """
    from agents.trajectory import read_trajectories, run_trajectory_file

    if config is not None and options:
        raise ValueError("give either a DistillConfig or its fields as keywords, not both")
    config = config or DistillConfig(**options)
    report = DistillReport()
    stages = _Stages(report)
    records: list[tuple[int, Any]] = []
    for run in runs:
        path = run_trajectory_file(run, f"`coa teach ... --out {run}` or `coa eval ... --out {run}` writes one")
        for trajectory in read_trajectories(path):
            report.sources[str(path)] = report.sources.get(str(path), 0) + 1
            records.append((len(records), trajectory))
    report.read = len(records)
    report.tasks_seen = len({(t.env_id, t.task_id) for _, t in records})

    items: list[tuple[int, Any]] = []
    failed: Counter[str] = Counter()
    for order, trajectory in records:
        try:
            items.append((order, convert(trajectory)))
        except ConversionError as error:
            report.errors.append(str(error))
            failed["convert_error"] += 1
    stages.record("convert", len(records), len(items), failed)
    items = stages.run("correct", items, lambda it: filters.correctness_reason(it[1], config.min_reward))
    items = stages.run("format", items, lambda it: filters.format_reason(it[1], config.allow_bad_actions))
    pool = EnvPool(config.make_kwargs)
    try:
        items = stages.run("leakage", items, lambda it: _leak(it[1], pool) if config.leak_check else None)
        seen: set[Any] = set()

        def duplicate(item: tuple[int, Any]) -> str | None:
            key = filters.dedup_key(item[1])
            if key in seen:
                return "duplicate"
            seen.add(key)
            return None

        items = stages.run("dedup", items, duplicate)
        items = stages.run("limits", items, lambda it: filters.limits_reason(it[1], config.max_turns, config.max_chars))
        items = stages.run("diversity", items,
                           lambda it: filters.diversity_reason(it[1], config.min_tools, config.min_roles))
        items = stages.run("replay", items, lambda it: replay_reason(it[1], pool) if config.replay else None)
        report.errors += sorted(set(pool.errors.values()))
    finally:
        pool.close()
    kept, capped = select([Candidate.of(t, order) for order, t in items], max_per_task=config.max_per_task,
                          budget=config.budget, prefer=config.prefer)
    stages.record("select", len(items), len(kept), capped)
    report.kept = len(kept)
    report.tasks_kept = len({(c.trajectory.env_id, c.trajectory.task_id) for c in kept})
    _write_outputs(report, [c.trajectory for c in kept], Path(out),
                   Path(sharegpt_out) if sharegpt_out else None, config.keep_token_ids)
    return report


def _leak(trajectory: Any, pool: EnvPool) -> str | None:
    task = pool.task(trajectory)
    if task is None:
        return "leak:unknown_task" if pool.get(trajectory) is not None else "leak:env_unavailable"
    env = pool.get(trajectory)
    return filters.leak_reason(trajectory, task.gold, list(env.unwrapped.config.tools))


def _write_outputs(report: DistillReport, kept: list[Any], out: Path, sharegpt: Path | None,
                   keep_token_ids: bool) -> None:
    if not keep_token_ids:
        for trajectory in kept:
            _drop_token_ids(trajectory)
    report.outputs = {"trajectories": str(out), **({"sharegpt": str(sharegpt)} if sharegpt else {})}
    report_path = out.with_name(out.name + ".report.json")
    partials = [(_write_atomically(out, (t.to_json() for t in kept)), out)]
    try:
        if sharegpt is not None:
            records = (json.dumps(to_sharegpt(t), ensure_ascii=False) for t in kept)
            partials.append((_write_atomically(sharegpt, records), sharegpt))
        partials.append((_write_atomically(report_path, [json.dumps(report.to_dict(), indent=2)]), report_path))
        report_path.unlink(missing_ok=True)  # never an old report beside new data
        for partial, final in partials:
            partial.replace(final)
    finally:
        for partial, _ in partials:
            partial.unlink(missing_ok=True)
