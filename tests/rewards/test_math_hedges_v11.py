"""math_verify v11: prose hedges beside (or inside) the box are second answers.

v3 read "Alternatively, 3", "or possibly $3$" and "if not, 3" as a second answer, from a closed
list of words; v10 still paid each reply below for its first value: "maybe", "perhaps",
"possibly" and "probably" alone, "else", "(or $x$)", "another candidate: x", a hedge written in
a box's ``\\text{}`` (which math-verify drops) and "(if not, x)" closed by the aside's bracket.
Each case but the last (which math-verify cannot parse) fails on math_verify v10.
"""

from __future__ import annotations

import pytest

from coa_envs.rewards.math_verify import VERSION, build
from coa_envs.types import Task

reward = build()
HALF = Task("t", "Find it.", gold=("\\frac12",))


def test_the_version_is_bumped():
    assert VERSION >= 11


@pytest.mark.parametrize("reply", [
    "\\boxed{\\frac12 \\text{ (maybe } \\frac13 \\text{)}}",
    "\\boxed{\\frac{1}{2}}, but possibly \\frac{1}{3}",
    "\\boxed{\\frac{1}{2}} (or $\\frac{1}{3}$)",
    "\\boxed{\\frac{1}{2}} or $\\frac{1}{3}$",
    "\\boxed{\\frac{1}{2}}; another candidate: $\\frac{1}{3}$",
    "\\boxed{\\frac{1}{2}} \\text{ (if not, } \\frac{1}{3})",
    "\\boxed{\\frac{1}{2}}, perhaps $\\frac{1}{3}$",
    "\\boxed{\\frac{1}{2}}, probably. Maybe $\\frac{1}{3}$.",
    "\\boxed{\\sqrt2 \\text{, else } \\sqrt3}",
])
def test_a_hedged_second_value_scores_nothing(reply):
    task = HALF if "sqrt" not in reply else Task("t", "Find it.", gold=("\\sqrt2",))
    assert reward(reply, task).score == 0.0


@pytest.mark.parametrize("reply", [
    "\\boxed{\\frac{1}{2}}",
    "\\boxed{\\frac{1}{2}}, or $0.5$",                       # the same value again
    "\\boxed{\\frac{1}{2}}; maybe easier to see by symmetry",  # prose, no value
    "The final answer is $\\frac12$. Perhaps surprisingly, it does not depend on n.",
    "\\boxed{\\frac12} (or equivalently $\\frac{2}{4}$)",
])
def test_prose_and_the_same_value_still_pay(reply):
    assert reward(reply, HALF).score == 1.0
