"""Evaluation metrics over sampled trajectories: avg@K, pass@k, best-of-k, tool statistics.

Definitions (the seed reports Pass@1, Pass@3 and Best-of-3; these reproduce them):

* **Pass@1 = avg@K**: the mean, over tasks, of the fraction of a task's K samples that are
  correct. With K=1 it is plain accuracy; it is also the unbiased pass@1 estimator.
* **pass@k** (``k <= K``): the unbiased estimator of Chen et al. (2021),
  ``1 - C(n-c, k) / C(n, k)`` per task with ``n`` samples of which ``c`` are correct,
  averaged over tasks. With ``n == k`` (the seed's Pass@3 from 3 runs) it is "at least
  one of the k samples is correct".
* **Best-of-k**: one answer is *selected* from a task's first k samples without looking at
  the gold answer, and that answer's correctness is scored. The default selector is a
  majority vote over normalised answers (ties go to the earliest sample); any callable
  ``(task_id, trajectories) -> index`` can stand in (a reward model or an LLM judge,
  as the seed's Bo3 used).

"Correct" means the primary reward term's score ``>= threshold`` (1.0 by default:
exact/verified answers; see :func:`solved`), which is the reward itself for one-term rewards. Failures
are counted by :class:`~agents.trajectory.EpisodeStatus` outcome, so eval and RL
trajectories (and files written before the status vocabulary was unified) count alike.
:func:`bootstrap_ci` gives the confidence interval of a mean over tasks (or of a paired
difference between two policies). Stdlib only.
"""

from __future__ import annotations

import math
import random
import re
import string
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agents.trajectory import EpisodeStatus, Trajectory

__all__ = [
    "Selector",
    "best_of_k",
    "bootstrap_ci",
    "group_by_task",
    "majority_vote",
    "pass_at_k",
    "pass_at_k_estimator",
    "pass_rates",
    "solved",
    "summarize",
]

Selector = Callable[[str, Sequence[Trajectory]], int]


def bootstrap_ci(values: Sequence[float], level: float = 0.95, resamples: int = 10_000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values``, one value per task.

    Tasks are the resampled unit, not episodes: the samples (seeds) of one task share its
    question and are correlated, so pass each task's mean over its samples. A paired
    comparison of two policies on the same tasks is this call on per-task differences, which
    is far tighter than comparing two separate intervals. Deterministic for a ``seed``.
    """
    if not values:
        raise ValueError("bootstrap_ci needs at least one value")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level}: must be in (0, 1)")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    low = means[max(0, math.floor(tail * resamples))]
    high = means[min(resamples - 1, math.ceil((1.0 - tail) * resamples) - 1)]
    return low, high


def pass_at_k_estimator(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def group_by_task(trajectories: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    """Samples per task, ordered by ``sample_index``."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in trajectories:
        groups[trajectory.task_id].append(trajectory)
    return {task: sorted(group, key=lambda t: t.sample_index) for task, group in groups.items()}


def solved(trajectory: Trajectory, threshold: float = 1.0) -> bool:
    """Whether the episode is correct: its *primary* reward term reached ``threshold``.

    With a composed reward (EM plus format, length and other shaping terms) the total is not
    a correctness signal; the primary term's score is (:mod:`coa_envs.rewards.compose`).
    Records without terms (one-term rewards recorded earlier) use the reward itself.
    """
    from coa_envs.rewards.compose import primary_score  # lazy: keeps this module stdlib-light

    details = trajectory.info.get("reward_details")
    if isinstance(details, dict) and "terms" in details:  # unscored primary (no answer): not solved
        score = primary_score(details)
        return score is not None and score >= threshold
    return trajectory.reward >= threshold


def pass_at_k(groups: dict[str, list[Trajectory]], k: int, threshold: float = 1.0) -> float:
    """Mean unbiased pass@k over tasks with at least k samples (NaN when none has)."""
    values = [pass_at_k_estimator(len(g), sum(solved(t, threshold) for t in g), k)
              for g in groups.values() if len(g) >= k]
    return sum(values) / len(values) if values else float("nan")


def pass_rates(groups: dict[str, list[Trajectory]], threshold: float = 1.0) -> dict[str, tuple[int, int]]:
    """``{task_id: (solved samples, samples)}``: how often the model solves each task."""
    return {task: (sum(solved(t, threshold) for t in group), len(group)) for task, group in groups.items()}


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_BOXED = re.compile(r"\\boxed\{(.*)\}")


def _normalise(answer: str | None) -> str:
    if not answer:
        return ""
    boxed = _BOXED.search(answer)
    text = (boxed.group(1) if boxed else answer).lower()
    text = "".join(ch for ch in text if ch not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _public_tests_only(trajectory: Trajectory) -> bool:
    details = trajectory.info.get("reward_details")
    return isinstance(details, dict) and details.get("public_tests_only") is True


def majority_vote(task_id: str, samples: Sequence[Trajectory]) -> int:
    """Index of the sample whose normalised answer is most frequent (earliest on ties);
    samples without an answer never win unless no sample has one."""
    answers = [_normalise(t.answer) for t in samples]
    counts = Counter(a for a in answers if a)
    if not counts:
        return 0
    best = max(counts.values())
    return next(i for i, a in enumerate(answers) if a and counts[a] == best)


def best_of_k(groups: dict[str, list[Trajectory]], k: int, selector: Selector = majority_vote,
              threshold: float = 1.0) -> float:
    """Accuracy of the selected answer among each task's first k samples."""
    values = []
    for task_id, group in groups.items():
        if len(group) < k:
            continue
        pool = group[:k]
        values.append(float(solved(pool[selector(task_id, pool)], threshold)))
    return sum(values) / len(values) if values else float("nan")


def summarize(
    env_id: str,
    trajectories: Sequence[Trajectory],
    *,
    samples: int = 1,
    wall_s: float = 0.0,
    selector: Selector = majority_vote,
    threshold: float = 1.0,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary.json of an evaluation run (keys are stable; the report reads them).

    Episodes whose answer got no verdict (``error:reward``: the judge was down, the scorer
    raised) are left out of accuracy, pass@k, best-of-k and ``solved`` and counted in
    ``unscored``: an outage is not "every answer wrong". ``public_tests_only`` counts episodes
    a code reward scored on the statement's example tests alone (a lookup table of the
    examples passes them; see :mod:`coa_envs.rewards.code_tests`).
    """
    unscored = [t for t in trajectories if EpisodeStatus.parse(t.status) is EpisodeStatus.ERROR_REWARD]
    groups = group_by_task(t for t in trajectories
                           if EpisodeStatus.parse(t.status) is not EpisodeStatus.ERROR_REWARD)
    episodes = len(trajectories)
    rewards = [t.reward for g in groups.values() for t in g]
    per_task = [sum(solved(t, threshold) for t in g) / len(g) for g in groups.values()]
    tool_calls: Counter[str] = Counter()
    tool_errors: Counter[str] = Counter()
    for t in trajectories:
        tool_calls.update(t.tool_calls)
        tool_errors.update(t.tool_errors)
    statuses = Counter(EpisodeStatus.parse(t.status) for t in trajectories)
    total_calls = sum(tool_calls.values())
    tokens = [t.info.get("response_tokens") for t in trajectories]
    counted = [x for x in tokens if isinstance(x, int)]
    chars = [int(t.info.get("response_chars") or len(t.response_text)) for t in trajectories]
    summary: dict[str, Any] = {
        "env_id": env_id,
        "episodes": episodes,
        "tasks": len(groups),
        "samples": samples,
        "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
        "accuracy": sum(per_task) / len(per_task) if per_task else 0.0,  # avg@K = Pass@1
        "pass_at_k": {str(k): pass_at_k(groups, k, threshold) for k in range(1, samples + 1)},
        "best_of_k": ({str(samples): best_of_k(groups, samples, selector, threshold)}
                      if samples > 1 else {}),
        "solved": sum(1 for g in groups.values() for t in g if solved(t, threshold)),
        "failed_tasks": [task for task, g in groups.items()
                         if not any(solved(t, threshold) for t in g)][:50],
        "mean_turns": sum(t.num_turns for t in trajectories) / episodes if episodes else 0.0,
        "tool_calls": dict(tool_calls),
        "tool_calls_per_episode": total_calls / episodes if episodes else 0.0,
        "tool_errors": dict(tool_errors),
        "tool_error_rate": sum(tool_errors.values()) / total_calls if total_calls else 0.0,
        "tokens_per_episode": sum(counted) / len(counted) if counted else None,
        "chars_per_episode": sum(chars) / episodes if episodes else 0.0,
        "status_counts": {str(s): n for s, n in statuses.items()},
        "errors": sum(n for s, n in statuses.items() if s.is_error),
        "truncated": sum(n for s, n in statuses.items() if s.is_truncated),
        "unscored": len(unscored),
        "public_tests_only": sum(1 for t in trajectories if _public_tests_only(t)),
        "wall_s": wall_s,
        "episodes_per_min": 60.0 * episodes / wall_s if wall_s > 0 else None,
    }
    if extra:
        summary.update(extra)
    return summary
