"""Which paths are runs, which trajectory files each holds, and which tokenizer decodes them.

What the project writes, and so what a run is here:

* ``coa eval --out DIR``: ``DIR/trajectories.jsonl`` and ``DIR/summary.json`` (its ``model``
  names the policy, whose tokenizer decodes the token ids);
* ``coa train rl`` (``output_dir``): ``config.json``, ``metrics.jsonl``, ``final/`` (policy and
  tokenizer), ``warm_start/oracle.jsonl`` when it warm-started, and any rollout dumps
  (``rollouts/step-<N>.jsonl``: every ``save_rollouts_every`` steps and at each alarm); its
  rollout-health view (``alarms.jsonl``, the last step's ``health/*`` and ``alarm/*``
  metrics) goes into the run's ``health`` entry, which the page shows beside the run;
* ``coa distill … --out FILE``: one trajectory JSONL file (with ``FILE.report.json``).

A directory is a run when a ``*.jsonl`` file up to :data:`_MAX_DEPTH` levels below it reads
as trajectories (its first line is an object with ``env_id`` and ``task_id``); JSONL of other
shapes (``metrics.jsonl``) is skipped. A path that is none of these is refused with a
message naming what was looked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.viewer.index import UNREADABLE, FileIndex, Vocabs
from coa_envs.errors import UserError

__all__ = ["NotARunError", "Run", "find_trajectory_files", "open_runs", "rl_health"]

_MAX_DEPTH = 3
_MAX_CANDIDATES = 500
_SNIFF_BYTES = 1 << 16
_SKIP_DIRS = frozenset({"checkpoints", "plots", "__pycache__", "node_modules"})
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
# summary.json fields worth a line in the page header (small scalars only).
_SUMMARY_KEYS = ("env_id", "agent", "model", "engine", "episodes", "tasks", "samples", "accuracy",
                 "mean_reward", "mean_turns")


class NotARunError(UserError, ValueError):
    """A path given to the viewer holds no trajectories."""


@dataclass
class Run:
    """One run: its trajectory files (each indexed), what produced it, and its tokenizer."""

    label: str
    path: Path
    kind: str
    files: list[FileIndex]
    meta: dict[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    health: bool = False  # an RL run: alarms.jsonl and the health metrics are read for info()

    def refresh(self) -> None:
        for index in self.files:
            index.refresh()

    def envs(self) -> list[str]:
        """Env ids of the run's readable episodes."""
        names = self.files[0].vocabs.env.names  # one vocabulary is shared by every file
        codes = {int(code) for index in self.files for code in np.unique(index.columns()["env"])}
        return sorted({names[code] for code in codes} - {UNREADABLE})

    def info(self, number: int) -> dict[str, Any]:
        files = [index.stats() for index in self.files]
        return {
            "run": number, "label": self.label, "path": str(self.path), "kind": self.kind, "meta": self.meta,
            "tokenizer": self.tokenizer, "files": [{**f, "path": _relative(f["path"], self.path)} for f in files],
            "episodes": sum(f["episodes"] for f in files), "unreadable": sum(f["unreadable"] for f in files),
            "envs": self.envs(), **({"health": rl_health(self.path)} if self.health else {}),
        }


_HEALTH_PREFIXES = ("health/", "alarm/", "async/staleness", "mismatch/ratio", "mismatch/kl",
                    "policy/entropy", "kl/ref")


def _last_line(path: Path, limit: int = 1 << 20) -> dict[str, Any]:
    """The last complete JSON line of ``path`` (read from its end; metrics files grow long)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            lines = handle.read().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        return row if isinstance(row, dict) else {}
    return {}


def rl_health(path: Path, max_alarms: int = 50) -> dict[str, Any]:
    """An RL run's rollout health: the alarms it raised (newest last) and the last logged
    step's health, alarm, staleness and mismatch metrics."""
    alarms = []
    try:
        for line in (path / "alarms.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                alarms.append(json.loads(line))
            except ValueError:
                continue
    except OSError:
        pass
    last = _last_line(path / "metrics.jsonl")
    latest = {k: v for k, v in last.items() if k.startswith(_HEALTH_PREFIXES) and isinstance(v, int | float)}
    return {"alarms": alarms[-max_alarms:], "step": last.get("step"), "latest": latest}


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return Path(path).name


def _looks_like_trajectories(path: Path) -> bool:
    """The first non-empty line is a trajectory object (or, if torn, starts like one)."""
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    head = line[:_SNIFF_BYTES]
                    return head.lstrip().startswith(b"{") and b'"env_id"' in head and b'"task_id"' in head
                return isinstance(data, dict) and "env_id" in data and "task_id" in data
    except OSError:
        return False
    return False


def find_trajectory_files(directory: Path) -> list[Path]:
    """Trajectory JSONL files under ``directory`` (``trajectories.jsonl`` first, then sorted)."""
    found: list[Path] = []
    candidates = 0
    frontier = [(directory, 0)]
    while frontier:
        folder, depth = frontier.pop(0)
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir() and not entry.is_symlink():
                if depth + 1 < _MAX_DEPTH and entry.name not in _SKIP_DIRS:
                    frontier.append((entry, depth + 1))
            elif entry.suffix == ".jsonl" and entry.is_file():
                candidates += 1
                if candidates <= _MAX_CANDIDATES and _looks_like_trajectories(entry):
                    found.append(entry)
    found.sort(key=lambda p: (p != directory / "trajectories.jsonl", len(p.relative_to(directory).parts), p))
    return found


def _tokenizer_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in _TOKENIZER_FILES)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(path: Path) -> tuple[str, dict[str, Any], str | None]:
    """``(kind, meta, tokenizer)`` of a run directory, from the files its writer leaves."""
    summary = _read_json(path / "summary.json")
    if summary:
        meta = {k: summary[k] for k in _SUMMARY_KEYS if isinstance(summary.get(k), str | int | float)}
        model = summary.get("model")
        return "eval", meta, model if isinstance(model, str) and model else None
    config = _read_json(path / "config.json")
    if config and (path / "metrics.jsonl").exists():
        meta = {k: config[k] for k in ("algorithm", "env_id", "model") if isinstance(config.get(k), str)}
        model = config.get("model") if isinstance(config.get("model"), str) else ""
        candidates = [path / "final", *([Path(model)] if model else []), path / "warm_start" / "final"]
        for candidate in candidates:
            if _tokenizer_dir(candidate):
                return "rl", meta, str(candidate)
        return "rl", meta, None
    return "run", {}, None


def _open_one(path: Path, vocabs: Vocabs) -> Run:
    if not path.exists():
        raise NotARunError(f"{path} does not exist")
    if path.is_file():
        if not _looks_like_trajectories(path):
            raise NotARunError(f"{path} is not trajectory JSONL: its first line is not an object with "
                               "env_id and task_id (coa eval, coa distill and RL runs write such lines)")
        kind = "distill" if path.with_name(path.name + ".report.json").exists() else "jsonl"
        report = _read_json(path.with_name(path.name + ".report.json"))
        meta = {k: report[k] for k in ("read", "kept", "acceptance_rate") if k in report}
        return Run(path.stem, path, kind, [FileIndex(path, vocabs)], meta)
    files = find_trajectory_files(path)
    if not files:
        raise NotARunError(
            f"{path} is not a run directory: no trajectory JSONL found up to {_MAX_DEPTH} levels below it "
            "(looked for trajectories.jsonl from coa eval, rollout dumps and warm_start/oracle.jsonl from "
            "coa train rl; a coa distill output is a .jsonl file: pass the file itself)")
    kind, meta, tokenizer = _describe(path)
    return Run(path.resolve().name or str(path), path, kind, [FileIndex(f, vocabs) for f in files], meta, tokenizer,
               health=kind == "rl")


def open_runs(paths: list[str | Path], vocabs: Vocabs, tokenizer: str | None = None) -> list[Run]:
    """Open and index every path (a bad one raises :class:`NotARunError`); labels made unique."""
    runs = [_open_one(Path(p), vocabs) for p in paths]
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.label] = seen.get(run.label, 0) + 1
        if seen[run.label] > 1:  # two runs with one directory name: keep them apart
            run.label = f"{run.label}#{seen[run.label]}"
        if tokenizer:
            run.tokenizer = tokenizer
        run.refresh()
    return runs
