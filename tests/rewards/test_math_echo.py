"""math_verify v4/v5: the question's own expression handed back (padded or not) is not its value.

"Simplify $\\sqrt{242}$" answered ``\\boxed{\\sqrt{242}}`` equals the gold ``11\\sqrt2`` to
math-verify, although nothing was simplified; before v4 the last formula of the question, boxed,
scored on 30 of MATH-500's 500 problems. Played here on the shipped held-out problems.
"""

from __future__ import annotations

import gymnasium as gym
import math_verify
import pytest

from coa_envs.audit import audit_env
from coa_envs.rewards.math_verify import build
from coa_envs.tasks.math import load_tasks
from coa_envs.types import Task

reward = build()
MATH500 = {t.task_id: t for t in load_tasks(dataset="math500")}


@pytest.mark.parametrize(("task_id", "echo"), [
    ("MATH500-31", "\\sqrt{242}"),                    # Simplify $\sqrt{242}$ -> 11\sqrt2
    ("MATH500-58", "99^2+99+1"),                      # Compute ... -> 9901
    ("MATH500-58", "(99)^{2} + 99 + 1"),              # the same expression written another way
    ("MATH500-102", "ab+5b+2a+10"),                   # Factor ... -> (a+5)(b+2)
    ("MATH500-54", "\\frac{3}{20}"),                  # Write $\frac{3}{20}$ as a decimal -> 0.15
    ("MATH500-348", "\\binom{31}{28}"),               # Compute $\dbinom{31}{28}$ (parsed as 4495)
])
def test_the_questions_own_expression_scores_nothing(task_id, echo):
    task = MATH500[task_id]
    assert math_verify.verify(math_verify.parse(f"\\boxed{{{task.gold[0]}}}"),
                              math_verify.parse(f"\\boxed{{{echo}}}"))  # math-verify alone: equal
    result = reward(f"\\boxed{{{echo}}}", task)
    assert result.score == 0.0 and "question's own expression" in result.details["reason"]
    assert reward(f"\\boxed{{{task.gold[0]}}}", task).score == 1.0


@pytest.mark.parametrize(("question", "gold", "answer"), [
    ("What is $\\sqrt{53}$ in simplest radical form?", "\\sqrt{53}", "\\sqrt{53}"),  # the gold is written so
    ("The edges sum to $13$. Find $m+n$.", "13", "13"),     # a number the question mentions may be the answer
    ("Let $x = \\frac{1}{2}$. Find $x$.", "\\frac12", "\\frac{1}{2}"),
    ("Simplify $2 + 3x$.", "3x+2", "3x + 2"),              # written as the gold (string form)
])
def test_an_answer_written_like_the_gold_still_scores(question, gold, answer):
    assert reward(f"\\boxed{{{answer}}}", Task("t", question, gold=(gold,))).score == 1.0


@pytest.mark.parametrize("padded", ["513^2 - 487^2 + 0", "1 \\cdot (513^2 - 487^2)", "(513^2-487^2)^{1}",
                                    "\\frac{513^2 - 487^2}{1}", "-(-(513^2 - 487^2))", "0 + 513^{2} - 487^{2}"])
def test_padding_does_not_disguise_the_echo(padded):
    assert reward(f"\\boxed{{{padded}}}", Task("t", "Compute $513^2 - 487^2$.", gold=("26000",))).score == 0.0


def test_computing_the_value_still_scores_where_the_echo_does_not():
    task = Task("t", "Compute $513^2 - 487^2$.", gold=("26000",))
    assert reward("\\boxed{513^2 - 487^2}", task).score == 0.0
    assert reward("\\boxed{26000}", task).score == 1.0
    assert reward("\\boxed{26{,}000}", task).score == 1.0


def test_the_env_pays_nothing_for_the_echo():
    env = gym.make("coa/MATH500-v1")
    try:
        env.reset(options={"task_id": "MATH500-31"})
        _, reward_value, terminated, _, info = env.step("<think>done</think>\n<answer>\\boxed{\\sqrt{242}}</answer>")
        assert terminated and reward_value == 0.0
        assert info["reward_details"]["terms"]["math_verify"]["version"] >= 5
    finally:
        env.close()


def test_the_audit_policy_that_boxes_the_questions_formula_earns_nothing():
    report = audit_env("coa/MATH500-v1", n_tasks=60, policies=["copy_question_expression"])
    assert report.results and not report.leaks, [(r.name, r.best_primary) for r in report.results]


def test_an_integer_with_a_decimal_point_the_question_mentions_may_be_the_answer():
    """math_verify v8: sympy's ``Float == int`` is always false, so ``13.0`` read as an expression."""
    task = Task("t", "A rope is $13.0$ m long and is not cut. How long is it, in metres?", gold=("13",))
    assert reward("\\boxed{13.0}", task).score == 1.0
    assert reward("\\boxed{13}", task).score == 1.0
