"""Compare evaluation runs side by side and draw their plots (``coa report``, ``coa eval``).

A *run* is a directory written by ``coa eval``: ``summary.json`` (see
:func:`agents.metrics.summarize`) and ``trajectories.jsonl``. This module reads runs back,
lays their headline metrics out as one table (one column per run) and draws two
matplotlib PNGs:

* ``accuracy_vs_turns.png``: for each turn budget ``t``, the fraction of episodes that
  were solved within at most ``t`` model turns, i.e. the accuracy the run would have had
  with ``max_turns = t``. It shows whether extra turns still buy accuracy.
* ``tool_usage.png``: tool calls per episode for each tool, one bar group per tool and one
  bar per run, with the run's tool error rate in the legend.

matplotlib is imported lazily (the ``llm`` extra) and always with the Agg backend, so
plotting works on headless machines and never opens a window.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.metrics import solved
from agents.trajectory import Trajectory, read_trajectories

__all__ = [
    "PLOT_NAMES",
    "Run",
    "accuracy_by_turn_budget",
    "comparison_rows",
    "load_run",
    "pyplot",
    "save_figure",
    "write_plots",
    "write_report",
]

PLOT_NAMES: tuple[str, ...] = ("accuracy_vs_turns.png", "tool_usage.png")


@dataclass(slots=True)
class Run:
    """One evaluation run read back from its directory."""

    label: str
    path: Path
    summary: dict[str, Any]
    trajectories: list[Trajectory] = field(default_factory=list)


def load_run(path: str | Path, label: str | None = None) -> Run:
    """Read ``summary.json`` (required) and ``trajectories.jsonl`` (optional) from ``path``."""
    root = Path(path)
    summary_file = root / "summary.json"
    if not summary_file.is_file():
        raise FileNotFoundError(f"{root} has no summary.json; is it a `coa eval` output directory?")
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    trajectory_file = root / "trajectories.jsonl"
    trajectories = list(read_trajectories(trajectory_file)) if trajectory_file.is_file() else []
    return Run(label=label or root.name or str(root), path=root, summary=summary,
               trajectories=trajectories)


def accuracy_by_turn_budget(trajectories: Sequence[Trajectory], threshold: float = 1.0,
                            max_budget: int | None = None) -> list[tuple[int, float]]:
    """``[(t, accuracy within <= t turns)]`` for ``t = 1..max_budget`` (default: the most
    turns any episode took)."""
    if not trajectories:
        return []
    top = max_budget or max((t.num_turns for t in trajectories), default=1) or 1
    total = len(trajectories)
    solved_at = [t.num_turns for t in trajectories if solved(t, threshold)]
    return [(budget, sum(1 for n in solved_at if n <= budget) / total)
            for budget in range(1, top + 1)]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items()) or "-"
    return str(value)


def comparison_rows(runs: Sequence[Run]) -> list[tuple[str, list[str]]]:
    """``[(metric, [value per run])]``: the side-by-side table ``coa report`` prints."""
    keys = ["env_id", "agent", "model", "episodes", "tasks", "samples", "accuracy"]
    ks = sorted({int(k) for r in runs for k in (r.summary.get("pass_at_k") or {})})
    bests = sorted({int(k) for r in runs for k in (r.summary.get("best_of_k") or {})})
    rows: list[tuple[str, list[str]]] = []
    for key in keys:
        rows.append((key, [_fmt(r.summary.get(key)) for r in runs]))
        if key == "env_id":  # which tasks: the split, and how many of it were played
            rows.append(("split", [_fmt(r.summary.get("split_description") or r.summary.get("split")) for r in runs]))
            rows.append(("played", [_played(r.summary) for r in runs]))
    for k in ks:
        rows.append((f"pass@{k}", [_fmt((r.summary.get("pass_at_k") or {}).get(str(k)))
                                   for r in runs]))
    for k in bests:
        rows.append((f"best-of-{k}", [_fmt((r.summary.get("best_of_k") or {}).get(str(k)))
                                      for r in runs]))
    for key in ("mean_turns", "tool_calls_per_episode", "tool_calls", "tool_error_rate",
                "tokens_per_episode", "errors", "truncated", "status_counts", "wall_s",
                "episodes_per_min"):
        rows.append((key, [_fmt(r.summary.get(key)) for r in runs]))
    # Shown only when they happened: episodes the reward could not judge (left out of accuracy)
    # and code scores taken on the statement's example tests alone (a lookup table passes them).
    for key, label in (("unscored", "unscored (no verdict)"), ("public_tests_only", "public tests only")):
        if any(r.summary.get(key) for r in runs):
            rows.append((label, [_fmt(r.summary.get(key, 0)) for r in runs]))
    return rows


def _played(summary: dict[str, Any]) -> str:
    """``8 of 100 tasks`` (distinct tasks played of the tasks in the split), when known."""
    total = summary.get("tasks_in_split")
    return _fmt(summary.get("tasks")) if total is None else f"{summary.get('tasks', 0)} of {total} tasks"


def pyplot() -> Any:
    """matplotlib.pyplot on the headless Agg backend (imported lazily: the ``llm`` extra)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, path: Path) -> Path:
    """Tight layout, write ``path``, close the figure (every plot of the project ends here)."""
    import matplotlib.pyplot as plt  # already set up by pyplot()

    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_plots(runs: Sequence[Run], out: str | Path) -> list[Path]:
    """Draw :data:`PLOT_NAMES` for ``runs`` into ``out``; returns the written paths."""
    plt = pyplot()
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    budget = max((t.num_turns for r in runs for t in r.trajectories), default=1) or 1
    for run in runs:
        curve = accuracy_by_turn_budget(run.trajectories, max_budget=budget)
        if curve:
            axes.plot([t for t, _ in curve], [a for _, a in curve], marker="o", label=run.label)
    axes.set_xlabel("turn budget (model turns)")
    axes.set_ylabel("accuracy within budget")
    axes.set_ylim(-0.02, 1.02)
    axes.set_xticks(range(1, budget + 1))
    axes.set_title("Accuracy vs turns")
    axes.grid(alpha=0.3)
    if any(r.trajectories for r in runs):
        axes.legend(fontsize="small")
    written.append(save_figure(figure, directory / PLOT_NAMES[0]))

    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    tools = sorted({name for r in runs for name in (r.summary.get("tool_calls") or {})})
    width = 0.8 / max(1, len(runs))
    for index, run in enumerate(runs):
        episodes = max(1, int(run.summary.get("episodes") or 0))
        calls = run.summary.get("tool_calls") or {}
        heights = [calls.get(tool, 0) / episodes for tool in tools]
        rate = run.summary.get("tool_error_rate") or 0.0
        axes.bar([i + index * width for i in range(len(tools))], heights, width=width,
                 label=f"{run.label} (tool errors {rate:.0%})")
    axes.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(len(tools))], tools)
    axes.set_ylabel("calls per episode")
    axes.set_title("Tool usage" if tools else "Tool usage (no tool calls)")
    axes.grid(axis="y", alpha=0.3)
    axes.legend(fontsize="small")
    written.append(save_figure(figure, directory / PLOT_NAMES[1]))
    return written


def write_report(runs: Sequence[Run], out: str | Path, plots: bool = True) -> dict[str, Any]:
    """Write ``comparison.json``, ``comparison.md`` and (optionally) the plots to ``out``."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    rows = comparison_rows(runs)
    labels = [r.label for r in runs]
    lines = ["| metric | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    lines += [f"| {key} | " + " | ".join(values) + " |" for key, values in rows]
    (directory / "comparison.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = {"runs": [{"label": r.label, "path": str(r.path), "summary": r.summary} for r in runs]}
    (directory / "comparison.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    data["plots"] = [str(p) for p in write_plots(runs, directory)] if plots else []
    data["rows"] = rows
    return data
