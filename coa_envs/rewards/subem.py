"""Sub-exact match for multi-hop QA: a gold alias contained in the answer.

The seed trains and reports MHQA with this looser cousin of EM beside it: after SQuAD
normalisation (:func:`coa_envs.rewards.em_f1.normalize_answer`) the answer scores 1 when
some gold alias occurs inside it, so "the river Thames in London" matches "Thames". As in
the seed and FlashRAG the test is a plain substring test, so a gold "1" is found in
"1990"; ``word_boundary: true`` asks for whole words instead. An empty gold never matches.

A sub-string test pays for length: the whole retrieved passage contains the answer, and so
does a list of every name on the page. So an answer scores only within the length cap of
:func:`~coa_envs.rewards.em_f1.length_cap` (2 x the longest gold's tokens + 3, after
normalisation), and 0 beyond it (``details["over_length_cap"]``); an answer that enumerates
candidates ("Wudia, Giarelora") scores only when every candidate contains a gold
(:func:`~coa_envs.rewards.em_f1.capped_score`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coa_envs.rewards.em_f1 import capped_score, extract_answer, normalize_answer
from coa_envs.types import RewardResult, Task

__all__ = ["VERSION", "SubExactMatch", "build", "sub_exact_match"]

VERSION = 2  # bump when the scores this term gives change (reported in reward_details)
# 2: answers longer than the length cap score 0 (a copied passage matched every gold); a list
#    of candidates scores only when every candidate matches


def sub_exact_match(prediction: str, gold: str, word_boundary: bool = False) -> bool:
    """True when the normalised ``gold`` occurs inside the normalised ``prediction``."""
    needle, haystack = normalize_answer(gold), normalize_answer(prediction)
    if not needle:
        return False
    if word_boundary:
        return f" {needle} " in f" {haystack} "
    return needle in haystack


@dataclass(frozen=True, slots=True)
class SubExactMatch:
    word_boundary: bool = False

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        answer = extract_answer(prediction or "")
        golds = [str(g) for g in task.gold]
        score, refusals = capped_score(lambda part, gold: sub_exact_match(part, gold, self.word_boundary),
                                       answer, golds)
        matched = next((g for g in golds if sub_exact_match(answer, g, self.word_boundary)), None) if score else None
        details: dict[str, Any] = {"subem": score, "matched_gold": matched, "prediction": answer, "golds": golds,
                                   **refusals}
        return RewardResult(score, details)


def build(word_boundary: bool = False) -> SubExactMatch:
    """``reward: {name: subem}``; ``word_boundary: true`` matches whole words only."""
    if not isinstance(word_boundary, bool):
        raise ValueError(f"subem: word_boundary={word_boundary!r} is not valid; allowed: true or false")
    return SubExactMatch(word_boundary)
