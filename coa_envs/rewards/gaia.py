"""GAIA's quasi-exact-match scorer, reimplemented from its published definition.

The GAIA leaderboard decides correctness by the *ground truth's* shape:

1. ground truth parses as a Python float -> the answer is read as a number after removing
   every ``$``, ``%`` and ``,``; an unparsable answer counts as ``inf``; compare floats;
2. else ground truth contains ``,`` or ``;`` -> both sides are split on either character,
   the lists must have equal length and agree element-wise (an element whose ground truth is
   a float uses rule 1, any other element is compared lowercased with all whitespace
   removed, punctuation *kept*);
3. else both strings are compared after removing all whitespace, lowercasing and removing
   ASCII punctuation (``string.punctuation``).

This module agrees with the official scorer on every input, quirks included (a ground
truth of ``"1,000"`` is a two-element list, ``"$5"`` is a string, ``"1_000"`` is a number
because Python's ``float`` accepts it), but one: the official scorer reads an answer that is
not a number as ``inf``, so a ground truth of ``"inf"`` / ``"Infinity"`` / ``"1e999"`` took
every non-number ("I do not know", "") as right. Here such an answer equals no number
(:func:`parse_gaia_number` still returns the official ``inf``). ``tests/web_envs/test_gaia_scorer.py``
pins them.
"""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from typing import Any

from coa_envs.types import RewardResult, Task

__all__ = ["VERSION", "GaiaReward", "build", "gaia_match", "normalize_answer_string", "parse_gaia_number"]

VERSION = 2  # bump when the scores this term gives change (reported in reward_details)
# 2: an answer that is not a number equals no number (an infinite ground truth took any text)

_NUMBER_NOISE = ("$", "%", ",")
_LIST_SEPARATORS = re.compile(r"[,;]")
_WHITESPACE = re.compile(r"\s")
_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_gaia_number(text: str) -> float:
    """Read an answer as a number the GAIA way; ``inf`` when it is not one."""
    for noise in _NUMBER_NOISE:
        text = text.replace(noise, "")
    value = _as_float(text)
    return math.inf if value is None else value


def normalize_answer_string(text: str, *, remove_punctuation: bool = True) -> str:
    """Remove all whitespace ("sea gull" == "seagull"), lowercase, optionally drop punctuation."""
    squeezed = _WHITESPACE.sub("", text).lower()
    return squeezed.translate(_DROP_PUNCTUATION) if remove_punctuation else squeezed


def _numbers_equal(answer: str, truth: float) -> bool:
    # Plain float equality, as the official scorer does (no tolerance, nan never equal), but
    # an answer that does not parse is no number (officially inf: equal to an infinite truth).
    for noise in _NUMBER_NOISE:
        answer = answer.replace(noise, "")
    value = _as_float(answer)
    return value is not None and value == truth


def gaia_match(model_answer: str | None, ground_truth: str) -> bool:
    """True when ``model_answer`` is correct for ``ground_truth`` under GAIA's rules."""
    answer = "None" if model_answer is None else str(model_answer)
    truth_number = _as_float(ground_truth)
    if truth_number is not None:
        return _numbers_equal(answer, truth_number)
    if "," in ground_truth or ";" in ground_truth:
        truth_items = _LIST_SEPARATORS.split(ground_truth)
        answer_items = _LIST_SEPARATORS.split(answer)
        if len(truth_items) != len(answer_items):
            return False
        for answer_item, truth_item in zip(answer_items, truth_items, strict=True):
            item_number = _as_float(truth_item)
            if item_number is not None:
                if not _numbers_equal(answer_item, item_number):
                    return False
            elif normalize_answer_string(
                answer_item, remove_punctuation=False
            ) != normalize_answer_string(truth_item, remove_punctuation=False):
                return False
        return True
    return normalize_answer_string(answer) == normalize_answer_string(ground_truth)


@dataclass(frozen=True, slots=True)
class GaiaReward:
    """Score 1.0 when the prediction matches any gold answer of the task under GAIA rules."""

    strip: bool = True

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        answer = prediction.strip() if self.strip and prediction is not None else prediction
        if not task.gold:
            return RewardResult(0.0, {"scorer": "gaia", "error": "task has no gold answer"})
        matched = [gold for gold in task.gold if gaia_match(answer, gold)]
        return RewardResult(
            1.0 if matched else 0.0,
            {"scorer": "gaia", "matched_gold": matched[0] if matched else None},
        )


def build(**config: Any) -> GaiaReward:
    """Registry entry point: ``reward: {name: gaia}`` (option ``strip``: trim the answer first).

    Trimming is on by default because the answer comes out of an ``<answer>`` span; the
    official scorer itself is whitespace-insensitive for strings and lists, and ``float``
    ignores surrounding whitespace, so trimming never changes a verdict.
    """
    unknown = set(config) - {"strip"}
    if unknown:
        raise ValueError(f"gaia reward: unknown option(s) {sorted(unknown)}; allowed: ['strip']")
    return GaiaReward(strip=bool(config.get("strip", True)))
