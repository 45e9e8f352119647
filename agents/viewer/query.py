"""Filter, sort and page episodes, and pair two runs task by task, over the index columns.

Everything here works on the numpy snapshots of :class:`~agents.viewer.index.FileIndex`
columns: a query over 100k episodes touches a few MB of numbers and never a trajectory. Only
the rows of the requested page are turned into JSON. The static export pages the same way in
the browser (``api.js`` implements this contract over the embedded rows), so the two must
agree on the meaning of every field of :class:`EpisodeQuery`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agents.viewer.index import Vocabs
from agents.viewer.runs import Run

__all__ = ["LENGTH_UNITS", "SORT_KEYS", "CompareQuery", "EpisodeQuery", "compare_runs", "select_episodes"]

SortKey = Literal["file", "reward", "turns", "tokens", "chars", "tool_calls", "tool_errors", "task", "status"]
SORT_KEYS: tuple[str, ...] = SortKey.__args__  # type: ignore[attr-defined]
LengthUnit = Literal["turns", "tokens", "chars"]
LENGTH_UNITS: tuple[str, ...] = LengthUnit.__args__  # type: ignore[attr-defined]
MAX_PAGE = 500
_KEYS_PER_SIDE = 32


@dataclass(frozen=True, slots=True)
class EpisodeQuery:
    """One page of the episode list. Empty strings and ``None`` mean "no filter".

    ``task`` matches task ids containing it (case-insensitive); ``task_id`` exactly.
    ``tool_errors``: ``none`` (no tool or action error) or ``some`` (at least one).
    ``min_len``/``max_len`` bound the length in ``len_unit`` (turns, tokens or characters of
    the response). Unreadable rows have a NaN reward: they fail reward bounds and sort last.
    """

    run: int | None = None
    env: str = ""
    task: str = ""
    task_id: str = ""
    status: str = ""
    min_reward: float | None = None
    max_reward: float | None = None
    min_len: int | None = None
    max_len: int | None = None
    len_unit: LengthUnit = "turns"
    tool_errors: Literal["", "none", "some"] = ""
    has_ids: Literal["", "yes", "no"] = ""
    sort: SortKey = "file"
    order: Literal["asc", "desc"] = "asc"
    offset: int = 0
    limit: int = 50

    def __post_init__(self) -> None:
        if self.sort not in SORT_KEYS:
            raise ValueError(f"sort={self.sort!r} is not valid; allowed: {list(SORT_KEYS)}")
        if self.len_unit not in LENGTH_UNITS:
            raise ValueError(f"len_unit={self.len_unit!r} is not valid; allowed: {list(LENGTH_UNITS)}")
        if not 1 <= self.limit <= MAX_PAGE or self.offset < 0:
            raise ValueError(f"limit must be 1..{MAX_PAGE} and offset >= 0")


@dataclass(frozen=True, slots=True)
class CompareQuery:
    """A page of tasks both runs played: mean reward per side and their difference (b - a)."""

    a: int = 0
    b: int = 1
    env: str = ""
    task: str = ""
    sort: Literal["delta", "task", "reward_a", "reward_b"] = "delta"
    order: Literal["asc", "desc"] = "asc"
    offset: int = 0
    limit: int = 50


def _gather(runs: list[Run], numbers: list[int]) -> dict[str, np.ndarray]:
    """Every column of the chosen runs, concatenated, plus run/file/row coordinates."""
    parts: list[dict[str, np.ndarray]] = []
    for number in numbers:
        for file_number, index in enumerate(runs[number].files):
            columns = index.columns()
            size = len(columns["offset"])
            parts.append({**columns, "run": np.full(size, number, np.int32),
                          "file": np.full(size, file_number, np.int32), "row": np.arange(size, dtype=np.int64)})
    if not parts:
        return {}
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _code_mask(values: np.ndarray, vocab_codes: np.ndarray | int | None) -> np.ndarray:
    if vocab_codes is None:
        return np.zeros(len(values), bool)
    return np.isin(values, vocab_codes)


def _text_filters(columns: dict[str, np.ndarray], vocabs: Vocabs, env: str, task: str,
                  task_id: str = "", status: str = "") -> np.ndarray:
    keep = np.ones(len(columns["env"]), bool)
    if env:
        keep &= _code_mask(columns["env"], vocabs.env.lookup(env))
    if task:
        keep &= _code_mask(columns["task"], vocabs.task.matching(task))
    if task_id:
        keep &= _code_mask(columns["task"], vocabs.task.lookup(task_id))
    if status:
        keep &= _code_mask(columns["status"], vocabs.status.lookup(status))
    return keep


def _facet(codes: np.ndarray, vocab_names: list[str]) -> list[tuple[str, int]]:
    counts = np.bincount(codes, minlength=0) if len(codes) else np.zeros(0, np.int64)
    return sorted(((vocab_names[i], int(n)) for i, n in enumerate(counts) if n), key=lambda item: (-item[1], item[0]))


def _sort_order(columns: dict[str, np.ndarray], vocabs: Vocabs, sort: str, descending: bool) -> np.ndarray:
    """Stable order; ties keep file order; NaN rewards last both ways."""
    if sort == "file":
        order = np.arange(len(columns["row"]))
        return order[::-1] if descending else order
    if sort in ("task", "status"):
        names = np.array(getattr(vocabs, sort).names, dtype=object)
        # Rank of each vocab code in alphabetical order, so codes sort as their strings do.
        rank = np.empty(len(names), np.int64)
        rank[np.argsort(names, kind="stable")] = np.arange(len(names))
        key = rank[columns[sort]].astype(np.float64)
        if sort == "task":  # samples of one task stay together, in sample order
            key = key * 1e6 + columns["sample"]
    else:
        key = columns[sort].astype(np.float64)
    key = -key if descending else key
    return np.argsort(key, kind="stable")  # NaN sorts last in numpy, whatever its sign


def _row(columns: dict[str, np.ndarray], vocabs: Vocabs, i: int) -> dict[str, Any]:
    reward = float(columns["reward"][i])
    run, file, row = int(columns["run"][i]), int(columns["file"][i]), int(columns["row"][i])
    return {
        "key": f"{run}.{file}.{row}", "run": run, "file": file, "row": row, "line": int(columns["line"][i]),
        "env_id": vocabs.env.names[columns["env"][i]], "task_id": vocabs.task.names[columns["task"][i]],
        "status": vocabs.status.names[columns["status"][i]], "reward": None if np.isnan(reward) else reward,
        "sample_index": int(columns["sample"][i]), "turns": int(columns["turns"][i]),
        "tokens": int(columns["tokens"][i]), "chars": int(columns["chars"][i]),
        "tool_calls": int(columns["tool_calls"][i]), "tool_errors": int(columns["tool_errors"][i]),
        "has_ids": bool(columns["has_ids"][i]),
    }


def select_episodes(runs: list[Run], vocabs: Vocabs, query: EpisodeQuery) -> dict[str, Any]:
    """``{total, offset, limit, rows, facets}`` for one page of the filtered, sorted list."""
    numbers = list(range(len(runs))) if query.run is None else [query.run]
    columns = _gather(runs, numbers)
    if not columns:
        return {"total": 0, "offset": query.offset, "limit": query.limit, "rows": [], "facets": {}}
    facets = {"env": _facet(columns["env"], vocabs.env.names), "status": _facet(columns["status"], vocabs.status.names)}
    keep = _text_filters(columns, vocabs, query.env, query.task, query.task_id, query.status)
    reward = columns["reward"]
    with np.errstate(invalid="ignore"):
        if query.min_reward is not None:
            keep &= reward >= query.min_reward
        if query.max_reward is not None:
            keep &= reward <= query.max_reward
    length = columns[query.len_unit]
    if query.min_len is not None:
        keep &= length >= query.min_len
    if query.max_len is not None:
        keep &= length <= query.max_len
    if query.tool_errors:
        keep &= (columns["tool_errors"] > 0) == (query.tool_errors == "some")
    if query.has_ids:
        keep &= columns["has_ids"].astype(bool) == (query.has_ids == "yes")
    chosen = {name: values[keep] for name, values in columns.items()}
    order = _sort_order(chosen, vocabs, query.sort, query.order == "desc")
    page = order[query.offset: query.offset + query.limit]
    return {"total": int(keep.sum()), "offset": query.offset, "limit": query.limit,
            "rows": [_row(chosen, vocabs, int(i)) for i in page], "facets": facets}


def _per_task(columns: dict[str, np.ndarray], keep: np.ndarray) -> dict[tuple[int, int], tuple[float, list[str]]]:
    """(env code, task code) -> (mean reward, episode keys in sample order) over readable rows."""
    groups: dict[tuple[int, int], list[int]] = {}
    envs, tasks = columns["env"], columns["task"]
    for i in np.flatnonzero(keep & ~np.isnan(columns["reward"])):
        groups.setdefault((int(envs[i]), int(tasks[i])), []).append(int(i))
    out = {}
    for task, members in groups.items():
        members.sort(key=lambda i: int(columns["sample"][i]))
        mean = float(np.mean(columns["reward"][members]))
        keys = [f"{columns['run'][i]}.{columns['file'][i]}.{columns['row'][i]}" for i in members]
        out[task] = (mean, keys)
    return out


def compare_runs(runs: list[Run], vocabs: Vocabs, query: CompareQuery) -> dict[str, Any]:
    """Tasks present in both runs, with mean reward per side, sorted and paged."""
    for number in (query.a, query.b):
        if not 0 <= number < len(runs):
            raise IndexError(f"run {number} does not exist (runs 0..{len(runs) - 1})")
    sides = []
    for number in (query.a, query.b):
        columns = _gather(runs, [number])
        keep = _text_filters(columns, vocabs, query.env, query.task)
        sides.append(_per_task(columns, keep))
    shared = sorted(sides[0].keys() & sides[1].keys(), key=lambda t: (vocabs.env.names[t[0]], vocabs.task.names[t[1]]))
    pairs = []
    for env_code, task_code in shared:
        (mean_a, keys_a), (mean_b, keys_b) = sides[0][(env_code, task_code)], sides[1][(env_code, task_code)]
        pairs.append({"env_id": vocabs.env.names[env_code], "task_id": vocabs.task.names[task_code],
                      "a": {"reward": mean_a, "n": len(keys_a), "keys": keys_a[:_KEYS_PER_SIDE]},
                      "b": {"reward": mean_b, "n": len(keys_b), "keys": keys_b[:_KEYS_PER_SIDE]},
                      "delta": mean_b - mean_a})
    sort_key = {"delta": lambda p: p["delta"], "task": lambda p: (p["env_id"], p["task_id"]),
                "reward_a": lambda p: p["a"]["reward"], "reward_b": lambda p: p["b"]["reward"]}[query.sort]
    pairs.sort(key=sort_key, reverse=query.order == "desc")
    return {"total": len(pairs), "offset": query.offset, "limit": query.limit,
            "only_a": len(sides[0].keys() - sides[1].keys()), "only_b": len(sides[1].keys() - sides[0].keys()),
            "rows": pairs[query.offset: query.offset + query.limit]}
