"""Per-step metrics: episode statistics, JSONL + TensorBoard logging, the reward-curve PNG.

The JSONL file is the source of truth (one object per step, flushed at once); on resume
lines past the checkpoint's step are dropped so a replayed step is not logged twice.
TensorBoard and the PNG are views of the same numbers.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.trajectory import Trajectory

__all__ = ["MetricsLogger", "episode_stats", "plot_reward_curve"]


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def episode_stats(trajectories: Sequence[Trajectory], prefix: str = "rollout") -> dict[str, float]:
    """Reward, accuracy, lengths, turns, tool calls and errors over a batch of episodes."""
    if not trajectories:
        return {f"{prefix}/episodes": 0.0}
    rewards = [float(t.reward) for t in trajectories]
    generated = [sum(len(s.token_ids) for s in t.segments if s.kind == "generated")
                 for t in trajectories]
    responses = [len(t.response_ids()) for t in trajectories]
    calls = [sum(t.tool_calls.values()) for t in trajectories]
    errors = [sum(t.tool_errors.values()) for t in trajectories]
    return {
        f"{prefix}/episodes": float(len(trajectories)),
        f"{prefix}/reward_mean": _mean(rewards),
        f"{prefix}/reward_std": float(statistics.pstdev(rewards)) if len(rewards) > 1 else 0.0,
        f"{prefix}/accuracy": _mean([float(r >= 1.0) for r in rewards]),
        f"{prefix}/response_tokens": _mean(responses),
        f"{prefix}/generated_tokens": _mean(generated),
        f"{prefix}/turns": _mean([t.num_turns for t in trajectories]),
        f"{prefix}/tool_calls": _mean(calls),
        f"{prefix}/tool_errors": _mean(errors),
        f"{prefix}/answered": _mean([float(t.terminated) for t in trajectories]),
        f"{prefix}/truncated": _mean([float(t.truncated) for t in trajectories]),
    }


class MetricsLogger:
    """Append step metrics to ``metrics.jsonl`` (and TensorBoard when enabled)."""

    def __init__(self, output_dir: str | Path, tensorboard: bool = True,
                 resume_step: int | None = None) -> None:
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and _step_of(line) is not None
                    and _step_of(line) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - long-lived
        self._writer: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(self.dir / "tensorboard"))
            except ImportError:  # tensorboard is in the `train` extra; JSONL still works
                self._writer = None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        self._handle.write(json.dumps(record) + "\n")
        self._handle.flush()
        if self._writer is not None:
            for key, value in metrics.items():
                self._writer.add_scalar(key, float(value), step)
            self._writer.flush()

    def close(self) -> None:
        self._handle.close()
        if self._writer is not None:
            self._writer.close()


def _step_of(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line after kill -9
    return rows


def plot_reward_curve(metrics_path: str | Path, png_path: str | Path, title: str = "") -> Path:
    """Batch reward (raw and smoothed), accuracy and eval reward per step, from the JSONL log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    everything = read_metrics(metrics_path)
    rows = [r for r in everything if "rollout/reward_mean" in r]
    steps = [r["step"] for r in rows]
    mean = [r["rollout/reward_mean"] for r in rows]
    acc = [r.get("rollout/accuracy", 0.0) for r in rows]
    window = max(1, min(10, len(mean) // 5))
    smooth = [_mean(mean[max(0, i - window + 1):i + 1]) for i in range(len(mean))]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, mean, label="batch reward mean", color="tab:blue", alpha=0.35)
    ax.plot(steps, smooth, label=f"batch reward, {window}-step mean", color="tab:blue")
    ax.plot(steps, acc, label="batch accuracy", color="tab:green", linestyle="--", alpha=0.5)
    evals = [r for r in everything if "eval/heldout_reward_mean" in r]
    if evals:
        tasks = int(evals[-1].get("eval/heldout_tasks", 0))
        ax.plot([r["step"] for r in evals], [r["eval/heldout_reward_mean"] for r in evals],
                marker="o", color="tab:red", label=f"held-out reward ({tasks} tasks, fixed seeds)")
    ax.set_xlabel("RL step")
    ax.set_ylabel("reward")
    ax.set_title(title or "RL reward curve")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    png_path = Path(png_path)
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path
