"""math_verify v12 (reward red team, round four): thin-space thousands, percent golds, letters
with a subscript, and a reply passed whole. Each case below fails on math_verify v11.

The review item of round three is pinned here too: a base-ten gold is paid by no numeral in
another base, even one of equal value (``52_8`` is 42): PRM800K needs an integer-written answer
for an integer gold, a question with a base-ten gold asks for base ten, and in a conversion
question the other-base numeral is the question's own, handed back (:mod:`._math_bases`).
"""

from __future__ import annotations

import pytest

from coa_envs.rewards import _math_bases
from coa_envs.rewards._math_bases import base_numeral
from coa_envs.rewards._math_forms import join_digit_groups
from coa_envs.rewards.math_verify import VERSION, build
from coa_envs.tasks.math import load_tasks
from coa_envs.types import Task

reward = build()


def score(answer: str, gold: str, question: str = "Find it.") -> float:
    return reward(f"\\boxed{{{answer}}}", Task("t", question, gold=(gold,))).score


def test_the_version_is_bumped():
    assert VERSION >= 12


@pytest.mark.parametrize(("answer", "gold"), [
    ("9\\,901", "9901"), ("9\\;901", "9901"), ("9\\ 901", "9901"), ("9~901", "9901"), ("9{\\,}901", "9901"),
    ("1\\,000\\,000", "1000000"), ("x = 12\\,345", "12345"), ("\\$1\\,250", "1250"), ("3.141\\,59", "3.14159"),
    ("(1\\,000, 2)", "(1000, 2)"),
])
def test_digits_grouped_by_a_thin_space_are_one_number(answer, gold):
    """math-verify reads ``9\\,901`` as 9 + 901 = 910: a correct answer scored 0."""
    assert score(answer, gold) == 1.0


@pytest.mark.parametrize(("answer", "gold"), [("9\\,901", "910"), ("1\\,000\\,000", "1000"), ("3 4", "7"),
                                              ("9 901", "910"), ("12\\,34", "1234")])
def test_grouped_digits_never_pay_their_sum_and_ungrouped_ones_stay_apart(answer, gold):
    assert score(answer, gold) == 0.0


def test_grouping_is_only_in_threes():
    assert join_digit_groups("12\\,34") == "12\\,34"
    assert join_digit_groups("3 4") == "3 4"
    assert join_digit_groups("10\\,0000") == "10\\,0000"
    assert join_digit_groups("0.123\\,4") == "0.1234"


def test_a_percent_gold_scores_other_answers_instead_of_raising():
    """OlympiadBench-150's gold is ``$8 \\%$``: every answer not written as the gold raised
    TypeError (int() of math-verify's unevaluated 8 * 1/100), an ``error:reward`` episode."""
    task = next(t for t in load_tasks(dataset="olympiadbench") if t.task_id == "OlympiadBench-150")
    assert task.gold == ("$8 \\%$",)
    for answer, expected in (("8", 1.0), ("8\\%", 1.0), ("0.08", 0.0), ("9", 0.0), ("\\frac{16}{2}", 0.0)):
        assert reward(f"\\boxed{{{answer}}}", task).score == expected, answer
    assert score("50", "50\\%") == 1.0
    assert score("0.5", "50\\%") == 0.0


@pytest.mark.parametrize("gold", ["B_{12}", "A_{11}", "AB_{12}", "F_{16}"])
def test_letters_with_a_subscript_are_no_base_numeral(gold):
    """``B_{12}`` names an entry or a point; read as the base-12 numeral B it was paid by ``B``."""
    assert base_numeral(gold) is None
    assert score(gold, gold) == 1.0
    assert score(gold.split("_")[0], gold) == 0.0
    assert score(str(int(gold.split("_")[0], int(gold[-3:-1]))), gold) == 0.0


def test_a_numeral_with_a_decimal_digit_keeps_its_base():
    assert base_numeral("1B_{12}") == ("1B", 12)
    assert score("1B", "1B_{12}") == 1.0
    assert score("1B_{13}", "1B_{12}") == 0.0
    assert score("23", "1B_{12}") == 0.0


@pytest.mark.parametrize("answer", ["52_8", "(52)_8", "101010_2", "2A_{16}", "1120_3", "52_{\\text{eight}}"])
def test_a_base_ten_gold_is_paid_by_no_numeral_in_another_base(answer):
    assert score(answer, "42") == 0.0
    assert score("42", "42") == score("42_{10}", "42") == 1.0


def test_the_base_ten_rule_gives_its_reasons():
    doc = _math_bases.__doc__ or ""
    assert "PRM800K" in doc and "base ten" in doc and "handed back" in doc


@pytest.mark.parametrize("reply", ["<answer>The answer is 33.</answer>", "<think>maybe 34</think><answer>33</answer>",
                                   "<answer>34</answer> <answer>The final answer is $33$.</answer>"])
def test_a_reply_passed_whole_is_read_from_its_last_answer_span(reply):
    assert reward(reply, Task("t", "Find it.", gold=("33",))).score == 1.0


@pytest.mark.parametrize("task_id", ["OlympiadBench-139", "OlympiadBench-188"])
def test_a_percentage_gold_is_paid_by_its_number(task_id):
    """``62.5%`` (OlympiadBench-139): math-verify paid ``62.5\\%`` and ``0.625`` but not ``62.5``,
    which MATH's grader accepts (it drops the sign); ``8`` already paid ``8\\%``."""
    task = next(t for t in load_tasks(dataset="olympiadbench") if t.task_id == task_id)
    number = task.gold[0].rstrip("%")
    assert reward(f"\\boxed{{{number}}}", task).score == 1.0
    assert reward(f"\\boxed{{{number}\\%}}", task).score == 1.0
    assert reward(f"\\boxed{{{float(number) + 1}}}", task).score == 0.0
