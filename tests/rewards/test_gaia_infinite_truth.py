"""gaia v2: an answer that is not a number equals no number, an infinite ground truth included.

The official scorer reads an unparsable answer as ``inf``; against a ground truth that Python's
``float`` reads as infinite ("inf", "Infinity", "1e999", HLE-style limits) every non-number,
"I do not know" and the empty answer included, was right. The official verdicts everywhere
else are pinned in tests/web_envs/test_gaia_scorer.py.
"""

from __future__ import annotations

import pytest

from coa_envs.rewards.gaia import build, gaia_match, parse_gaia_number
from coa_envs.rewards.llm_judge import build as build_judge
from coa_envs.types import Task

NON_NUMBERS = ["I do not know", "unknown", "", "Paris", "∞", "a lot"]


@pytest.mark.parametrize("truth", ["inf", "Infinity", "+inf", "1e999", "infinity, 3"])
@pytest.mark.parametrize("answer", NON_NUMBERS)
def test_a_non_number_is_not_infinity(truth, answer):
    wrong = f"{answer}, 3" if "," in truth else answer
    assert gaia_match(wrong, truth) is False


@pytest.mark.parametrize(("answer", "truth"), [("inf", "inf"), ("Infinity", "inf"), ("-inf", "-Infinity"),
                                               ("1e999", "Infinity"), ("inf, 3", "infinity, 3")])
def test_an_infinite_answer_still_matches_an_infinite_truth(answer, truth):
    assert gaia_match(answer, truth) is True


def test_the_reward_and_the_judges_fallback_pay_nothing_for_a_non_answer(monkeypatch):
    for name in ("COA_JUDGE_BASE_URL", "COA_JUDGE_MODEL", "COA_JUDGE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    task = Task("t", "What is the limit of n as n grows?", gold=("Infinity",))
    assert build()("I do not know", task).score == 0.0
    fallback = build_judge()("I do not know", task)
    assert fallback.details["scorer"] == "fallback_em" and fallback.score == 0.0
    assert build()("inf", task).score == 1.0


def test_the_official_number_reading_is_unchanged():
    assert parse_gaia_number("I do not know") == float("inf")
