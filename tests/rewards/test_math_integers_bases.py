"""math_verify v9: integer golds and base-n numerals, graded as PRM800K / MATH grade them.

math-verify evaluates some forms while parsing (``\\frac{4}{2}`` is the integer 2, ``\\binom{5}{2}``
is 10), so v8's integer rule (an integer gold needs an integer-written answer) refused ``10^6`` for
1000000 but paid ``\\frac{4}{2}`` for 2. PRM800K's grader requires a strict integer string when the
gold is one (``_str_is_int``), element by element for tuples, so both are wrong. math-verify also
drops a numeral's base subscript: ``52_9`` and ``52_{10}`` paid MATH-500's ``52_8``, and ``52_8``
paid a decimal 52. Each refusal below fails on math_verify v8.
"""

from __future__ import annotations

import pytest

from coa_envs.rewards._math_bases import base_numeral
from coa_envs.rewards.math_verify import VERSION, build
from coa_envs.tasks.math import load_tasks
from coa_envs.types import Task

reward = build()
MATH500 = {t.task_id: t for t in load_tasks(dataset="math500")}


def score(answer: str, gold: str, question: str = "Find it.") -> float:
    return reward(f"<answer>\\boxed{{{answer}}}</answer>", Task("t", question, gold=(gold,))).score


def test_the_version_is_bumped():
    assert VERSION >= 10


@pytest.mark.parametrize(("answer", "gold"), [
    ("\\frac{4}{2}", "2"), ("\\dfrac{19802}{2}", "9901"), ("4/2", "2"), ("\\binom{5}{2}", "10"),
    ("-(-3)", "3"), ("\\frac{-4}{-2}", "2"), ("\\frac{8}{4}", "2.0"), ("10^6", "1000000"),
    ("x = \\frac{4}{2}", "2"), ("\\dfrac{9901}{1}", "9901"),
])
def test_a_form_math_verify_evaluates_while_parsing_does_not_pay_an_integer_gold(answer, gold):
    assert score(answer, gold) == 0.0


@pytest.mark.parametrize(("answer", "gold"), [("3 4", "7"), ("9 901", "910"), ("4 \\text{ (maybe 3)}", "4")])
def test_numbers_math_verify_adds_or_drops_are_not_an_integer(answer, gold):
    """math-verify reads ``3 4`` as 3 + 4 (and drops text holding a second number): written so,
    the answer is no numeral of the gold's value."""
    assert score(answer, gold) == 0.0


@pytest.mark.parametrize("answer", ["9901", "+9901", "09901", "9{,}901", "9,901", "9901.0", "9,901.00",
                                    "x = 9901", "9901 \\text{ ways}", "9901\\text{ cm}^{2}", "\\$9{,}901",
                                    "\\{9901\\}", "\\left(9901\\right)", "\\text{9901}", "\\mathbf{9901}",
                                    "9901^\\circ", "9901_{10}", "9901 \\text{ or } 9901", "9901\\%"])
def test_an_integer_written_as_one_still_pays(answer):
    assert score(answer, "9901") == 1.0


@pytest.mark.parametrize("answer", ["(\\frac{16}{2}, -2)", "(8, -(2))", "(2^3, -2)",
                                    "\\left(\\frac{16}{2}, -2\\right)"])
def test_each_integer_element_of_a_tuple_gold_needs_an_integer(answer):
    assert score(answer, "(8,-2)") == 0.0


@pytest.mark.parametrize("answer", ["(8,-2)", "\\left( 8, -2 \\right)", "(8.0, -2)", "(x, y) = (8, -2)"])
def test_an_integer_tuple_still_pays(answer):
    assert score(answer, "(8,-2)") == 1.0


def test_integer_sets_and_mixed_tuples():
    assert score("x = 1 \\text{ or } x = -2", "1,-2") == 1.0
    assert score("\\frac{2}{2}, -2", "1,-2") == 0.0
    assert score("(2, \\frac{2}{4})", "(2, \\frac{1}{2})") == 1.0  # a fraction element stays a value


@pytest.mark.parametrize("answer", ["52_8", "52_{8}", "52", "(52)_8", "52_{(8)}", "52_{\\text{eight}}",
                                    "x = 52_8", "\\{52_8\\}", "52_8 \\text{ (base eight)}"])
def test_a_base_n_gold_pays_its_numeral(answer):
    task = MATH500["MATH500-30"]  # Find the product of $6_8 \cdot 7_8.$ Express your answer in base $8.$
    assert task.gold == ("52_8",)
    assert reward(f"\\boxed{{{answer}}}", task).score == 1.0


@pytest.mark.parametrize("answer", ["52_9", "52_{10}", "42", "42_{10}", "101010_2", "53_8", "52_8 + 0",
                                    "6_8 \\cdot 7_8", "52_9 = 52_8"])
def test_a_base_n_gold_refuses_other_bases_and_digits(answer):
    assert reward(f"\\boxed{{{answer}}}", MATH500["MATH500-30"]).score == 0.0


@pytest.mark.parametrize("answer", ["52_8", "52_{8}", "(52)_8", "\\{52_8\\}", "52_8 \\text{ or } 52_8", "x = 52_8"])
def test_a_numeral_in_another_base_does_not_pay_its_digits_as_decimal(answer):
    assert score(answer, "52") == 0.0


def test_a_decimal_gold_asks_for_base_ten():
    task = MATH500["MATH500-278"]  # What's the largest eight-digit base 2 integer? Express ... in base 10.
    assert task.gold == ("255",)
    assert reward("\\boxed{11111111_2}", task).score == 0.0
    assert reward("\\boxed{255}", task).score == 1.0
    assert reward("\\boxed{255_{10}}", task).score == 1.0
    assert score("52_8", "42", "What is $52_8$ in base ten?") == 0.0  # the question's numeral handed back


def test_every_shipped_base_gold_pays_its_digits_and_refuses_the_next_base():
    golds = [t for t in MATH500.values() if base_numeral(t.gold[0])]
    assert len(golds) == 6
    for task in golds:
        digits, base = base_numeral(task.gold[0])
        for right in (task.gold[0], digits, f"{digits}_{{{base}}}"):
            assert reward(f"\\boxed{{{right}}}", task).score == 1.0, (task.task_id, right)
        for wrong in (f"{digits}_{{{base + 1}}}", f"{digits}_{{10}}", str(int(digits, base))):
            assert reward(f"\\boxed{{{wrong}}}", task).score == 0.0, (task.task_id, wrong)


@pytest.mark.parametrize(("gold", "answer"), [("x_1", "x_1"), ("a_5 + 1", "a_5+1"), ("\\log_2 3", "\\log_{2} 3"),
                                              ("A_2 = 3", "A_2=3")])
def test_subscripts_that_are_no_base_are_left_to_math_verify(gold, answer):
    assert score(answer, gold) == 1.0
