"""Rollout health: what a policy under RL is doing to its episodes, and alarms when it drifts.

RL finds every way to earn reward without solving the task, and the first signs are in the
rollouts long before the held-out score moves: tool calls that fail, the same search sent
again and again, episodes cut at the turn or token limit, turns the env could not parse,
answers that grow or shrink, an entropy that collapses. :func:`health_stats` measures them
per step, over all episodes and per env of a mixture (``health/...``,
``health/<env>/...``):

* ``tool_failure_rate``: failed tool calls / tool calls;
* ``repeated_query_rate``: tool calls that repeat an earlier (tool, query) of the same
  episode / tool calls;
* ``truncation_rate``: episodes cut by a limit; ``format_violation_rate``: turns the env had
  to correct (malformed tags, two tools, empty query) / turns;
* ``answer_chars``: mean length of the final answers; ``rollout_entropy``: mean negative
  logprob of the sampled tokens, an unbiased estimate of the sampling policy's entropy per
  token (the learner's exact ``policy/entropy`` sits beside it);
* ``reward_term/<label>``: each reward term's weighted contribution, mean per episode;
* ``kl/ref`` (learner): KL to the reference policy, with ``health.kl_to_reference`` even
  when the loss has no KL term.

:class:`AlarmMonitor` watches any logged metric with the rules of ``health.alarms``: a
metric that *drops* to a fraction of where it started (entropy collapse), *rises* by an
amount (format violations rising), crosses an absolute level (*above*/*below*), or
*diverges* from another (training reward rising while the held-out reward falls). An alarm
prints a loud line, sets ``alarm/<name>`` to 1 while it holds, is appended to
``alarms.jsonl`` in the run directory (``coa view`` shows it), and with ``stop: true`` ends
the run after that step's checkpoint.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trainers.common.config import ConfigError, check_fields

if TYPE_CHECKING:
    from agents.trajectory import Trajectory

__all__ = ["AlarmMonitor", "AlarmSpec", "HealthSection", "health_stats"]


@dataclass
class AlarmSpec:
    """One alarm rule over a logged metric."""

    name: str = ""
    """Its name in ``alarm/<name>`` and alarms.jsonl."""
    metric: str = ""
    """The metric watched (any key of metrics.jsonl, e.g. ``policy/entropy``)."""
    kind: Literal["drop", "rise", "above", "below", "diverge"] = "drop"
    """drop: the recent mean falls below ``threshold`` x the starting mean; rise: the recent
    mean exceeds the starting mean by ``threshold``; above/below: the recent mean crosses
    ``threshold``; diverge: between the last two values of ``against`` (e.g. two held-out
    evals) ``against`` fell by ``threshold`` while ``metric`` rose by ``threshold``."""
    threshold: float = 0.5
    """The fraction (drop) or amount (rise, diverge) or level (above, below)."""
    window: int = 3
    """Logged values averaged for the starting and the recent mean."""
    against: str = ""
    """diverge: the metric that must not fall while ``metric`` rises."""
    stop: bool = False
    """End the run (after this step's checkpoint) when the alarm fires."""

    def __post_init__(self) -> None:
        check_fields(self, "health.alarms[].")
        if not self.name or not self.metric:
            raise ConfigError("health.alarms[]: every alarm needs a name and a metric")
        if self.kind == "diverge" and not self.against:
            raise ConfigError(f"health.alarms[{self.name}]: kind diverge needs `against` (the "
                              "metric that must not fall, e.g. eval/heldout_reward_mean)")
        if self.window < 1:
            raise ConfigError(f"health.alarms[{self.name}].window must be >= 1")


def _default_alarms() -> list[AlarmSpec]:
    return [
        AlarmSpec("entropy_collapse", "policy/entropy", "drop", 0.3, 3),
        AlarmSpec("reward_up_heldout_down", "rollout/reward_mean", "diverge", 0.05, 3,
                  against="eval/heldout_reward_mean"),
        AlarmSpec("format_violations_rising", "health/format_violation_rate", "rise", 0.15, 3),
    ]


@dataclass
class HealthSection:
    """Rollout-health metrics and the alarms that watch them."""

    kl_to_reference: bool = False
    """Score every batch with the reference policy (the starting weights; with LoRA the base
    with the adapter off) and log ``kl/ref`` even when ``algorithm.kl_coef`` is 0 (one more
    forward pass per step)."""
    alarms: list[AlarmSpec] = field(default_factory=_default_alarms)
    """Alarm rules (default: entropy collapse, training reward rising while the held-out
    reward falls, format violations rising); ``[]`` turns them off."""

    def __post_init__(self) -> None:
        check_fields(self, "health.")
        self.alarms = [a if isinstance(a, AlarmSpec) else AlarmSpec(**a) for a in self.alarms]
        names = [a.name for a in self.alarms]
        if len(set(names)) != len(names):
            raise ConfigError(f"health.alarms: names must differ, got {names}")


# -- metrics ----------------------------------------------------------------------------------
def _mean(values: list[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def _queries(trajectory: Trajectory) -> list[tuple[str, str]]:
    from coa_envs.protocol import parse_turn

    calls = []
    for segment in trajectory.segments:
        if segment.kind == "generated":
            calls.extend((c.tool, " ".join(c.query.lower().split()))
                         for c in parse_turn(segment.text).tool_calls)
    return calls


def _episode_health(trajectory: Trajectory) -> dict[str, float]:
    calls = sum(trajectory.tool_calls.values())
    errors = trajectory.tool_errors
    queries = _queries(trajectory)
    repeats = len(queries) - len(set(queries))
    logprobs = [lp for s in trajectory.segments if s.kind == "generated" for lp in s.logprobs]
    return {
        "calls": float(calls),
        "tool_failures": float(sum(v for k, v in errors.items() if k != "action")),
        "queries": float(len(queries)),
        "repeats": float(repeats),
        "turns": float(trajectory.num_turns),
        "format_violations": float(errors.get("action", 0)),
        "truncated": float(trajectory.truncated),
        "answer_chars": float(len(trajectory.answer)) if trajectory.answer is not None else -1.0,
        "neg_logprob_sum": -float(sum(logprobs)),
        "logprob_tokens": float(len(logprobs)),
    }


def health_stats(trajectories: list[Trajectory], prefix: str = "health") -> dict[str, float]:
    """Rollout-health metrics of one step's episodes (see the module docstring)."""
    if not trajectories:
        return {}
    rows = [_episode_health(t) for t in trajectories]

    def total(key: str) -> float:
        return sum(r[key] for r in rows)

    answers = [r["answer_chars"] for r in rows if r["answer_chars"] >= 0]
    stats = {
        f"{prefix}/tool_failure_rate": total("tool_failures") / max(total("calls"), 1.0),
        f"{prefix}/repeated_query_rate": total("repeats") / max(total("queries"), 1.0),
        f"{prefix}/truncation_rate": total("truncated") / len(rows),
        f"{prefix}/format_violation_rate": total("format_violations") / max(total("turns"), 1.0),
        f"{prefix}/answer_chars": _mean(answers),
        f"{prefix}/answered_share": len(answers) / len(rows),
    }
    if total("logprob_tokens"):
        stats[f"{prefix}/rollout_entropy"] = total("neg_logprob_sum") / total("logprob_tokens")
    terms: dict[str, list[float]] = {}
    for trajectory in trajectories:
        details = trajectory.info.get("reward_details") or {}
        for label, term in (details.get("terms") or {}).items():
            if isinstance(term, dict) and isinstance(term.get("weighted"), int | float):
                terms.setdefault(str(label), []).append(float(term["weighted"]))
    for label, values in terms.items():
        stats[f"{prefix}/reward_term/{label}"] = sum(values) / len(trajectories)
    return stats


# -- alarms -----------------------------------------------------------------------------------
class AlarmMonitor:
    """Checks ``alarms`` after every logged step; see the module docstring."""

    def __init__(self, alarms: list[AlarmSpec], output_dir: str | Path | None = None,
                 history: list[dict[str, Any]] | None = None) -> None:
        """``history``: the metrics.jsonl rows of a resumed run (its starting means carry
        over); without it, a run's alarms.jsonl starts afresh."""
        self.alarms = alarms
        self.series: dict[str, list[tuple[int, float]]] = {}  # metric -> (step, value)
        self.active: set[str] = set()
        self.path = Path(output_dir) / "alarms.jsonl" if output_dir is not None else None
        if history is None and self.path is not None:
            self.path.unlink(missing_ok=True)
        for row in history or []:
            self._record(int(row.get("step", 0)), row)

    def _record(self, step: int, metrics: dict[str, Any]) -> None:
        for key, value in metrics.items():
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                self.series.setdefault(key, []).append((step, float(value)))

    def observe(self, step: int, metrics: dict[str, Any]) -> tuple[dict[str, float], bool]:
        """Record ``metrics`` of ``step``; returns ``({alarm/<name>: 0 or 1}, stop)``."""
        self._record(step, metrics)
        flags: dict[str, float] = {}
        stop = False
        for alarm in self.alarms:
            message = self._diverge(alarm) if alarm.kind == "diverge" else self._level(alarm)
            flags[f"alarm/{alarm.name}"] = float(message is not None)
            if message is None:
                self.active.discard(alarm.name)
                continue
            stop = stop or alarm.stop
            if alarm.name not in self.active:  # loud once when it starts; the flag meanwhile
                self.active.add(alarm.name)
                self._report(step, alarm, message)
        return flags, stop

    def _level(self, alarm: AlarmSpec) -> str | None:
        values = [v for _, v in self.series.get(alarm.metric, [])]
        window = alarm.window
        if not values:
            return None
        recent = _mean(values[-window:])
        if alarm.kind in ("above", "below"):
            crossed = recent > alarm.threshold if alarm.kind == "above" else recent < alarm.threshold
            return (f"{alarm.metric} = {recent:.4g} (mean of the last {min(window, len(values))}) "
                    f"is {alarm.kind} {alarm.threshold:g}") if crossed else None
        if len(values) < 2 * window:
            return None
        start = _mean(values[:window])
        if alarm.kind == "drop" and start > 0 and recent < alarm.threshold * start:
            return (f"{alarm.metric} fell from {start:.4g} to {recent:.4g} "
                    f"(below {alarm.threshold:g} of where it started)")
        if alarm.kind == "rise" and recent - start >= alarm.threshold:
            return f"{alarm.metric} rose from {start:.4g} to {recent:.4g} (+{recent - start:.4g})"
        return None

    def _diverge(self, alarm: AlarmSpec) -> str | None:
        """Between the last two values of ``against`` (two evals), did it fall by the
        threshold while ``metric`` (its last ``window`` values up to each) rose by it?"""
        marks = self.series.get(alarm.against, [])
        if len(marks) < 2:
            return None
        (before, low), (after, high) = marks[-2], marks[-1]
        series = self.series.get(alarm.metric, [])
        old = [v for s, v in series if s <= before][-alarm.window:]
        new = [v for s, v in series if before < s <= after][-alarm.window:]
        if not old or not new:
            return None
        rose = _mean(new) - _mean(old)
        if high - low <= -alarm.threshold and rose >= alarm.threshold:
            return (f"{alarm.against} fell {low:.4g} -> {high:.4g} while {alarm.metric} rose "
                    f"by {rose:.4g} (steps {before}-{after})")
        return None

    def _report(self, step: int, alarm: AlarmSpec, message: str) -> None:
        line = f"[rl] ALARM {alarm.name} at step {step}: {message}" + \
            (" -- stopping the run (stop: true)" if alarm.stop else "")
        print(f"\n{'!' * 8} {line} {'!' * 8}\n", file=sys.stderr, flush=True)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"step": step, "alarm": alarm.name, "metric": alarm.metric,
                                         "kind": alarm.kind, "message": message,
                                         "stop": alarm.stop}) + "\n")
