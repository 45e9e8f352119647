"""RL metrics: episode statistics of a batch, and the reward-curve PNG.

Logging itself is the shared ``trainers.common.MetricsLogger`` (``metrics.jsonl`` +
TensorBoard); the PNG is a view of the same JSONL numbers.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.metrics import solved
from trainers.common.metrics import read_metrics

if TYPE_CHECKING:
    from agents.trajectory import Trajectory

__all__ = ["episode_stats", "plot_reward_curve", "weights_nbytes"]


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def episode_stats(trajectories: Sequence[Trajectory], prefix: str = "rollout") -> dict[str, float]:
    """Reward, accuracy, lengths, turns, tool calls and errors over a batch of episodes.

    Reward and accuracy leave out the episodes the reward could not judge (``error:reward``,
    e.g. a judge that was down): ``<prefix>/unscored`` counts them instead of scoring them 0.
    """
    if not trajectories:
        return {f"{prefix}/episodes": 0.0}
    from agents.trajectory import EpisodeStatus

    unscored = sum(1 for t in trajectories if EpisodeStatus.parse(t.status) is EpisodeStatus.ERROR_REWARD)
    judged = [t for t in trajectories if EpisodeStatus.parse(t.status) is not EpisodeStatus.ERROR_REWARD]
    rewards = [float(t.reward) for t in judged]
    generated = [sum(len(s.token_ids) for s in t.segments if s.kind == "generated")
                 for t in trajectories]
    responses = [len(t.response_ids()) for t in trajectories]
    calls = [sum(t.tool_calls.values()) for t in trajectories]
    errors = [sum(t.tool_errors.values()) for t in trajectories]
    return {
        f"{prefix}/episodes": float(len(trajectories)),
        f"{prefix}/reward_mean": _mean(rewards),
        f"{prefix}/reward_std": float(statistics.pstdev(rewards)) if len(rewards) > 1 else 0.0,
        f"{prefix}/accuracy": _mean([float(solved(t)) for t in judged]),  # the primary term
        f"{prefix}/unscored": float(unscored),
        f"{prefix}/response_tokens": _mean(responses),
        f"{prefix}/generated_tokens": _mean(generated),
        f"{prefix}/turns": _mean([t.num_turns for t in trajectories]),
        f"{prefix}/tool_calls": _mean(calls),
        f"{prefix}/tool_errors": _mean(errors),
        f"{prefix}/answered": _mean([float(t.terminated) for t in trajectories]),
        f"{prefix}/truncated": _mean([float(t.truncated) for t in trajectories]),
    }


def weights_nbytes(state: Any) -> float:
    """Bytes one weight sync moves: a full state dict, or LoRA adapters (``LoraWeights``)."""
    nbytes = getattr(state, "nbytes", None)
    if nbytes is not None:
        return float(nbytes)
    return float(sum(t.numel() * t.element_size() for t in state.values()))


def _smoothed(values: list[float], window: int) -> list[float]:
    return [_mean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def plot_reward_curve(metrics_path: str | Path, png_path: str | Path, title: str = "",
                      envs: Sequence[str] = ()) -> Path:
    """Batch reward (raw and smoothed), accuracy and eval reward per step, from the JSONL log.

    ``envs``: the names of a mixture's envs; each gets its own colour, a smoothed batch
    reward line (``rollout/<name>/reward_mean``, solid) and its held-out eval
    (``eval/<name>/heldout_reward_mean``, dashed with markers), beside the overall lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    everything = read_metrics(metrics_path)
    rows = [r for r in everything if "rollout/reward_mean" in r]
    steps = [r["step"] for r in rows]
    mean = [r["rollout/reward_mean"] for r in rows]
    acc = [r.get("rollout/accuracy", 0.0) for r in rows]
    window = max(1, min(10, len(mean) // 5))
    smooth = _smoothed(mean, window)
    fig, ax = plt.subplots(figsize=(11, 4.5) if envs else (7, 4))
    ax.plot(steps, mean, label="batch reward mean", color="tab:blue", alpha=0.35)
    ax.plot(steps, smooth, label=f"batch reward, {window}-step mean", color="tab:blue")
    ax.plot(steps, acc, label="batch accuracy", color="tab:green", linestyle="--", alpha=0.5)
    evals = [r for r in everything if "eval/heldout_reward_mean" in r]
    if evals:
        tasks = int(evals[-1].get("eval/heldout_tasks", 0))
        ax.plot([r["step"] for r in evals], [r["eval/heldout_reward_mean"] for r in evals],
                marker="o", color="tab:red", label=f"held-out reward ({tasks} tasks, fixed seeds)")
    palette = ("tab:purple", "tab:orange", "tab:brown", "tab:olive", "tab:cyan", "tab:pink")
    for index, name in enumerate(envs):
        color = palette[index % len(palette)]
        key = f"rollout/{name}/reward_mean"
        mine = [r for r in rows if key in r]  # a step may draw no group of this env
        if mine:
            ax.plot([r["step"] for r in mine], _smoothed([r[key] for r in mine], window),
                    color=color, linewidth=2, label=f"{name}: batch reward, {window}-step mean")
        key = f"eval/{name}/heldout_reward_mean"
        held = [r for r in everything if key in r]
        if held:
            ax.plot([r["step"] for r in held], [r[key] for r in held], color=color,
                    linestyle="--", marker="s", label=f"{name}: held-out reward")
    ax.set_xlabel("RL step")
    ax.set_ylabel("reward")
    ax.set_title(title or "RL reward curve")
    ax.grid(alpha=0.3)
    if envs:  # more lines than fit beside the curves: the legend goes right of the axes
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    else:
        ax.legend(loc="best")
    fig.tight_layout()
    png_path = Path(png_path)
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path
