"""The two math-verify calls the math reward makes (parse an expression, compare two parsed
values), each given a second chance when math-verify's wall-clock alarm cut it.

math-verify guards parsing and comparison with ``signal.alarm``, which measures wall-clock time
and gives up silently ([] / False). On a loaded machine (an RL run's rollout workers, load 10-15)
a correct answer that needs a second of sympy can run out its time and score 0: a false negative
the policy would be trained on. :func:`patiently` tries such a call once more with
``RETRY_FACTOR`` times the time; a pathological answer still ends, at ``(1 + RETRY_FACTOR) *
timeout`` seconds, and reads as unparseable / unequal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from coa_envs.rewards._math_forms import join_digit_groups

__all__ = ["RETRY_FACTOR", "parse_boxed", "patiently", "verify_values"]

RETRY_FACTOR = 4
"""A parse or comparison cut by math-verify's alarm is tried once more with this many times the
time."""
_ALARM_SLACK_S = 0.05

T = TypeVar("T")


def patiently(attempt: Callable[[int], T], timeout: int, failed: Callable[[T], bool]) -> T:
    """``attempt(timeout)``, and once more with ``RETRY_FACTOR`` times the time when it failed
    only because the alarm fired (it used up its time)."""
    started = time.monotonic()
    result = attempt(timeout)
    if failed(result) and time.monotonic() - started >= timeout - _ALARM_SLACK_S:
        result = attempt(timeout * RETRY_FACTOR)
    return result


def parse_boxed(expression: str, timeout: int) -> list[Any]:
    """The expression math-verify reads in ``\\boxed{expression}``, or [] when it reads none.

    LaTeX extraction only, no fallback: math-verify's other extractors would pick the last
    number out of text they cannot parse ("1 (or 204)" -> 204), a second answer by another road.
    Digits grouped in threes by spaces are one number (``9\\,901``: :func:`join_digit_groups`).
    """
    from math_verify import LatexExtractionConfig, parse

    expression = join_digit_groups(expression)
    latex_only = [LatexExtractionConfig(try_extract_without_anchor=False)]

    def attempt(seconds: int) -> list[Any]:
        try:
            return parse(f"\\boxed{{{expression}}}", extraction_config=latex_only,
                         fallback_mode="no_fallback", parsing_timeout=seconds)
        except Exception:  # math-verify/sympy can fail on odd LaTeX: treat as unparseable
            return []

    found = patiently(attempt, timeout, lambda result: not result)
    return [value for value in found if not isinstance(value, str)]


def verify_values(a: list[Any], b: list[Any], timeout: int, rounding: int) -> bool:
    """math-verify's verdict on two parsed values (False when it cannot compare them)."""
    from math_verify import verify

    def attempt(seconds: int) -> bool:
        try:
            return bool(verify(a, b, float_rounding=rounding, timeout_seconds=seconds))
        except Exception:
            return False

    return patiently(attempt, timeout, lambda equal: not equal)
