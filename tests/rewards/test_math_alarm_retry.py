"""math-verify's parse and comparison alarms measure wall-clock time: on a loaded machine a
correct answer's parse can be cut and read as unparseable, and the answer scored 0 (a false
negative an RL run would train on; seen at load 10-15). A cut parse or comparison is tried once
more with ``RETRY_FACTOR`` times the time; one that fails by itself is not retried."""

from __future__ import annotations

import time

import math_verify
import pytest

from coa_envs.rewards.math_verify import MathVerifyReward
from coa_envs.types import Task

GOLD = r"1.2\times10^3"


@pytest.fixture
def first_gold_parse_cut(monkeypatch):
    """The gold's first parse is cut by the alarm (it ran out its time and math-verify gave up
    with []), as under load; later parses run as usual. Records each call's time budget."""
    real = math_verify.parse
    budgets: list[int] = []

    def parse(pred, *args, parsing_timeout=5, **kwargs):
        if "times" in pred:
            budgets.append(parsing_timeout)
            if len(budgets) == 1:
                time.sleep(parsing_timeout)
                return []
        return real(pred, *args, parsing_timeout=parsing_timeout, **kwargs)

    monkeypatch.setattr(math_verify, "parse", parse)
    return budgets


def test_a_parse_cut_by_the_alarm_is_tried_again_with_more_time(first_gold_parse_cut):
    reward = MathVerifyReward(timeout_s=1)
    result = reward("The answer is $\\boxed{1200}$.", Task(task_id="t", question="q", gold=(GOLD,)))
    assert result.score == 1.0, result
    assert first_gold_parse_cut[:2] == [1, 4]


def test_a_parse_that_fails_quickly_is_not_retried(monkeypatch):
    calls: list[str] = []
    real = math_verify.parse

    def parse(pred, *args, **kwargs):
        calls.append(pred)
        return real(pred, *args, **kwargs)

    monkeypatch.setattr(math_verify, "parse", parse)
    result = MathVerifyReward(timeout_s=1)("\\boxed{\\frac{}{}}", Task(task_id="t", question="q", gold=("1200",)))
    assert result.score == 0.0
    assert len(calls) == len(set(calls))  # each expression parsed once: nothing timed out
