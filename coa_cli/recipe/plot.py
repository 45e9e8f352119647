"""``report.png`` of a recipe run: held-out accuracy per stage, and what RL did step by step.

Four panels from the report's own numbers (``report.json``): (1) held-out accuracy of every
eval set after each stage with its 95% interval; (2) RL's rewards: the training batch's
reward, the pass rate of the groups it kept and of every group drawn, and the held-out
curve; (3) the policy's entropy and its KL to the SFT policy; (4) response length, the share
of tool calls that failed, and the groups kept per group drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_report"]

_STAGES = ("baseline", "SFT", "RL")


def _bars(axis: Any, data: dict[str, Any]) -> None:
    sets = list(data["evals"])
    width = 0.8 / max(len(sets), 1)
    for index, name in enumerate(sets):
        results = [data["evals"][name][label] for label in _STAGES]
        xs = [i + (index - (len(sets) - 1) / 2) * width for i in range(len(_STAGES))]
        heights = [r["accuracy"] if r else 0.0 for r in results]
        errors = [[r["accuracy"] - r["ci95"][0] if r else 0.0 for r in results],
                  [r["ci95"][1] - r["accuracy"] if r else 0.0 for r in results]]
        tasks = next((r["tasks"] for r in results if r), 0)
        drawn = axis.bar(xs, heights, width, yerr=errors, capsize=4,
                         label=f"{name} ({tasks} held-out tasks)")
        for x, height, result in zip(xs, heights, results, strict=True):
            if result:
                axis.text(x, height + 0.02, f"{height:.2f}", ha="center", fontsize=8,
                          color=drawn.patches[0].get_facecolor())
    axis.set_xticks(range(len(_STAGES)), _STAGES)
    axis.set_ylim(0, 1.05)
    axis.set_ylabel("held-out accuracy (95% CI)")
    axis.set_title(f"{data['model']}: held-out accuracy by stage")
    axis.legend(loc="upper left", fontsize=8)


def _series(curve: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(p["step"], p[key]) for p in curve if key in p]
    return [s for s, _ in points], [v for _, v in points]


def _rewards(axis: Any, rl: dict[str, Any]) -> None:
    curve = rl["curve"]
    for key, label, style in (("batch_reward", "training batch reward", "-"),
                              ("kept_pass_rate", "pass rate of the kept groups", "--"),
                              ("drawn_pass_rate", "pass rate of every group drawn", ":")):
        axis.plot(*_series(curve, key), linestyle=style, marker=".", label=label)
    held = rl.get("heldout_curve") or []
    if held:
        axis.plot([p["step"] for p in held], [p["reward"] for p in held], marker="o",
                  color="tab:red", label=f"held-out reward ({held[-1].get('tasks') or 0:.0f} tasks)")
    axis.set_ylim(0, 1.05)
    axis.set_title("RL: what the batch rewards vs what the policy solves")
    axis.set_xlabel("RL step")
    axis.legend(loc="best", fontsize=7)
    axis.grid(alpha=0.3)


def _policy(axis: Any, rl: dict[str, Any]) -> None:
    curve = rl["curve"]
    axis.plot(*_series(curve, "entropy"), marker=".", color="tab:purple", label="entropy (nats/token)")
    axis.set_ylabel("entropy")
    axis.set_xlabel("RL step")
    axis.set_title("Policy: entropy and KL to the SFT policy")
    steps, kl = _series(curve, "kl_to_sft")
    if kl:
        twin = axis.twinx()
        twin.plot(steps, kl, marker=".", color="tab:brown", label="KL to SFT (nats/token)")
        twin.set_ylabel("KL to SFT")
        twin.legend(loc="upper right", fontsize=7)
    axis.legend(loc="upper left", fontsize=7)
    axis.grid(alpha=0.3)


def _behaviour(axis: Any, rl: dict[str, Any]) -> None:
    curve = rl["curve"]
    axis.plot(*_series(curve, "response_tokens"), marker=".", color="tab:blue",
              label="response tokens / episode")
    axis.set_ylabel("tokens")
    axis.set_xlabel("RL step")
    axis.set_title("Behaviour: length, tool failures, groups kept")
    twin = axis.twinx()
    twin.plot(*_series(curve, "tool_failure_share"), marker=".", color="tab:orange",
              label="tool calls that failed")
    kept = [(p["step"], p["groups_kept"] / p["groups_drawn"]) for p in curve
            if p.get("groups_drawn")]
    twin.plot([s for s, _ in kept], [v for _, v in kept], marker=".", color="tab:green",
              linestyle="--", label="groups kept / drawn")
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("share")
    axis.legend(loc="upper left", fontsize=7)
    twin.legend(loc="upper right", fontsize=7)
    axis.grid(alpha=0.3)


def plot_report(data: dict[str, Any], path: Path) -> Path:
    """Draw the four panels into ``path`` (PNG)."""
    from agents.report import pyplot, save_figure

    plt = pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    _bars(axes[0][0], data)
    rl = data.get("rl")
    if rl and rl.get("curve"):
        _rewards(axes[0][1], rl)
        _policy(axes[1][0], rl)
        _behaviour(axes[1][1], rl)
    else:
        for axis in (axes[0][1], axes[1][0], axes[1][1]):
            axis.text(0.5, 0.5, "RL has not run yet", ha="center", va="center")
            axis.set_axis_off()
    figure.tight_layout()
    return save_figure(figure, path)
