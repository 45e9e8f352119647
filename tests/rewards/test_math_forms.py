"""math_verify v7: answer forms the MATH / AIME grading conventions do not accept.

math-verify reads an equation by its last side and rounds decimals to 6 places, so before v7
``\\boxed{204 = 211}`` paid for the gold 211 (a false equation hedging two numbers),
``\\boxed{99\\cdot99+99+1}`` for 9901 (nothing computed), ``1.414214`` for ``\\sqrt{2}`` and
0.000067 for ``.0000672``. Each case below fails on math_verify v6.
"""

from __future__ import annotations

import pytest

from coa_envs.rewards.math_verify import build
from coa_envs.tasks.math import load_tasks
from coa_envs.types import Task

reward = build()


def score(answer: str, gold: str) -> float:
    return reward(f"<answer>\\boxed{{{answer}}}</answer>", Task("t", "Find it.", gold=(gold,))).score


@pytest.mark.parametrize("answer", ["204 = 211", "x = 204 = 211", "211 + 1 = 211", "\\frac{422}{3} = 211"])
def test_a_false_equation_does_not_pay_its_last_side(answer):
    assert score(answer, "211") == 0.0


def test_a_false_equation_stated_in_a_sentence_does_not_pay():
    task = Task("t", "Find it.", gold=("211",))
    assert reward("The final answer is $204 = 211$.", task).score == 0.0


@pytest.mark.parametrize("answer", ["x = 211", "200 + 11 = 211", "n = 200 + 11 = 211", "211"])
def test_a_true_equation_or_an_assignment_still_pays(answer):
    assert score(answer, "211") == 1.0


def test_an_alternative_inside_a_set_that_is_a_false_equation_does_not_pay():
    assert score("x = 3 \\text{ or } x = 4", "3, 4") == 1.0
    assert score("3 = 4 \\text{ or } x = 3", "3, 4") == 0.0


@pytest.mark.parametrize("answer", ["99\\cdot99+99+1", "9900 + 1", "99^2 + 100", "9901 \\cdot 1 + 0"])
def test_an_unfinished_computation_does_not_pay_an_integer_gold(answer):
    assert score(answer, "9901") == 0.0


@pytest.mark.parametrize("answer", ["9901", "9{,}901", "9,901", "9901.0", "x = 9901", "9901 \\text{ ways}",
                                    "99 \\cdot 99 + 100 = 9901", "\\$9901", "\\{9901\\}", "(9901)"])
def test_an_integer_written_as_one_still_pays(answer):
    assert score(answer, "9901") == 1.0


def test_amc_integers_written_with_a_decimal_point_are_integers():
    assert score("26 + 1", "27.0") == 0.0
    assert score("26.9999999", "27.0") == 0.0
    assert score("27", "27.0") == 1.0
    assert score("27.0", "27.0") == 1.0


def test_an_unfinished_form_written_like_the_gold_pays():
    assert score("2^{10}", "2^{10}") == 1.0  # the gold itself is a power: not an integer gold


@pytest.mark.parametrize(("answer", "gold"), [("1.414214", "\\sqrt{2}"), ("0.333333", "\\frac{1}{3}"),
                                              ("3.141593", "\\pi"), ("0.5000001", "\\frac12"),
                                              ("1.060660", "\\frac{3\\sqrt{2}}{4}")])
def test_a_decimal_approximation_of_an_exact_gold_does_not_pay(answer, gold):
    assert score(answer, gold) == 0.0


@pytest.mark.parametrize(("answer", "gold"), [("0.5", "\\frac12"), ("0.125", "\\frac{1}{8}"),
                                              ("1.5\\sqrt{2}", "\\frac{3\\sqrt{2}}{2}"), ("-0.375", "-\\frac{3}{8}"),
                                              ("\\frac{1}{3}", "\\frac{1}{3}"), ("0.33", "0.33")])
def test_an_exact_decimal_still_pays(answer, gold):
    assert score(answer, gold) == 1.0


def test_a_decimal_gold_is_compared_to_its_own_decimals():
    task = next(t for t in load_tasks(dataset="math500") if t.task_id == "MATH500-176")
    assert task.gold[0] == ".0000672"
    for wrong in ("0.000067", "0.0000671"):
        assert reward(f"\\boxed{{{wrong}}}", task).score == 0.0
    for right in (".0000672", "0.0000672", "6.72 \\times 10^{-5}"):
        assert reward(f"\\boxed{{{right}}}", task).score == 1.0


def test_the_refusal_is_named_in_the_details():
    result = reward("\\boxed{204 = 211}", Task("t", "Find it.", gold=("211",)))
    assert "false equation" in result.details["reason"]


@pytest.mark.parametrize("dataset", ["aime24", "amc23"])
def test_shipped_integer_golds_pay_written_and_refuse_unfinished(dataset):
    for task in load_tasks(dataset=dataset):
        value = int(float(task.gold[0]))
        assert reward(f"\\boxed{{{task.gold[0]}}}", task).score == 1.0, task.task_id
        assert reward(f"The final answer is ${value}$.", task).score == 1.0, task.task_id
        assert reward(f"\\boxed{{{value - 1} + 1}}", task).score == 0.0, task.task_id


@pytest.mark.parametrize("env_id", ["coa/AIME25-v1", "coa/AMC23-v1"])
def test_the_audit_policies_for_these_forms_earn_nothing(env_id):
    from coa_envs.audit import audit_env

    report = audit_env(env_id, n_tasks=40, policies=["copy_question_arithmetic", "hedge_false_equation"])
    assert len(report.results) == 2 and not report.leaks, [(r.name, r.best_primary) for r in report.results]
