"""pass@k, avg@K and best-of-k reproduce their definitions on hand-made tables."""

from __future__ import annotations

import math

import pytest

from agents.metrics import (
    best_of_k,
    group_by_task,
    majority_vote,
    pass_at_k,
    pass_at_k_estimator,
    summarize,
)
from agents.trajectory import Trajectory


def _brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that a uniformly random k-subset of n samples holds a correct one."""
    from itertools import combinations

    samples = [1] * c + [0] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (1, 0, 1, 0.0), (1, 1, 1, 1.0),
    (3, 1, 1, 1 / 3), (3, 1, 3, 1.0), (3, 0, 3, 0.0),
    (5, 2, 2, 1 - 3 / 10),          # 1 - C(3,2)/C(5,2)
    (10, 3, 5, 1 - 21 / 252),       # 1 - C(7,5)/C(10,5)
    (8, 7, 2, 1.0),                  # n - c < k
])
def test_pass_at_k_table(n, c, k, expected):
    assert pass_at_k_estimator(n, c, k) == pytest.approx(expected)
    assert pass_at_k_estimator(n, c, k) == pytest.approx(_brute_force_pass_at_k(n, c, k))


def test_pass_at_k_rejects_impossible_inputs():
    with pytest.raises(ValueError):
        pass_at_k_estimator(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k_estimator(3, 1, 4)


def _traj(task: str, sample: int, reward: float, answer: str | None) -> Trajectory:
    return Trajectory(env_id="e", task_id=task, sample_index=sample, reward=reward,
                      answer=answer, terminated=answer is not None)


def test_seed_definitions_pass1_pass3_best_of_3():
    # task a: 1 of 3 right, the majority is wrong; b: 2 of 3 right (majority right);
    # c: none right; d: all three right.
    rows = [
        _traj("a", 0, 0.0, "Paris"), _traj("a", 1, 1.0, "Lyon"), _traj("a", 2, 0.0, "paris"),
        _traj("b", 0, 1.0, "42"), _traj("b", 1, 0.0, "41"), _traj("b", 2, 1.0, "\\boxed{42}"),
        _traj("c", 0, 0.0, "x"), _traj("c", 1, 0.0, None), _traj("c", 2, 0.0, "y"),
        _traj("d", 0, 1.0, "z"), _traj("d", 1, 1.0, "z"), _traj("d", 2, 1.0, "Z"),
    ]
    groups = group_by_task(rows)
    summary = summarize("e", rows, samples=3)
    # Pass@1 = mean per-task success rate = (1/3 + 2/3 + 0 + 1) / 4
    assert summary["accuracy"] == pytest.approx(0.5)
    assert summary["pass_at_k"]["1"] == pytest.approx(0.5)
    # Pass@3 with 3 samples = any correct: a, b, d
    assert summary["pass_at_k"]["3"] == pytest.approx(0.75)
    assert pass_at_k(groups, 2) == pytest.approx((2 / 3 + 1 + 0 + 1) / 4)
    # Best-of-3 by majority vote: a picks "paris" (wrong), b picks "42" (right), c picks
    # "x" (tie, earliest), d right -> 2/4
    assert summary["best_of_k"]["3"] == pytest.approx(0.5)
    assert majority_vote("a", groups["a"]) == 0
    # A selector that peeks at nothing but picks the last sample
    assert best_of_k(groups, 3, selector=lambda task, pool: len(pool) - 1) == pytest.approx(0.5)


def test_summary_counts_failures_separately():
    rows = [_traj("a", 0, 1.0, "1"), _traj("b", 0, 0.0, None), _traj("c", 0, 0.0, None)]
    rows[1].status = "error:engine_timeout"
    rows[2].status, rows[2].truncated = "truncated:max_turns", True
    rows[0].tool_calls, rows[0].tool_errors = {"wiki_search": 3, "code": 1}, {"code": 1}
    summary = summarize("e", rows, wall_s=30.0)
    assert summary["errors"] == 1 and summary["truncated"] == 1
    assert summary["status_counts"] == {"ok": 1, "error:engine_timeout": 1,
                                        "truncated:max_turns": 1}
    assert summary["tool_error_rate"] == pytest.approx(0.25)
    assert summary["episodes_per_min"] == pytest.approx(6.0)
    assert math.isnan(pass_at_k(group_by_task(rows), 2))


def test_bootstrap_ci_matches_the_normal_interval_for_many_tasks_and_is_deterministic():
    import statistics

    from agents.metrics import bootstrap_ci

    values = [1.0] * 120 + [0.0] * 80  # 200 tasks, mean 0.6
    low, high = bootstrap_ci(values, seed=3)
    half = 1.96 * statistics.pstdev(values) / len(values) ** 0.5  # 0.0679
    assert low < 0.6 < high
    assert abs((0.6 - low) - half) < 0.012 and abs((high - 0.6) - half) < 0.012
    assert bootstrap_ci(values, seed=3) == (low, high)
    assert bootstrap_ci([0.25] * 7) == (0.25, 0.25)  # no spread, no width
    # paired differences of a policy that is better on every task exclude zero
    assert bootstrap_ci([0.5, 0.5, 1.0, 0.5])[0] > 0
    with pytest.raises(ValueError):
        bootstrap_ci([])
