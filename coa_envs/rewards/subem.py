"""Sub-exact match for multi-hop QA: a gold alias contained in the answer.

The seed trains and reports MHQA with this looser cousin of EM beside it: after SQuAD
normalisation (:func:`coa_envs.rewards.em_f1.normalize_answer`) the answer scores 1 when
some gold alias occurs inside it, so "the river Thames in London" matches "Thames". An empty
gold never matches.

The gold must occur as **whole words** (the default, ``word_boundary: true``): either in the
normalised answer, or in its words with punctuation read as spaces ("Thames's" holds
"Thames"; "U.S." and "US" match through the normalised form). The seed's and FlashRAG's plain
substring test (``word_boundary: false``, kept for comparison with their figures) finds a gold
"1" in "1990", and so pays for glued answers: "0123456789" holds every one-digit gold and
"WudiaGiareloraRepae" every name it glues, whatever the question.

A sub-string test pays for length: the whole retrieved passage contains the answer, and so
does a list of every name on the page. So an answer scores only within the length cap of
:func:`~coa_envs.rewards.em_f1.length_cap` (2 x the longest gold's tokens + 3, after
normalisation), and 0 beyond it (``details["over_length_cap"]``); an answer that enumerates
candidates ("Wudia, Giarelora", "Wudia vs Giarelora", "Wudia - Giarelora", "Wudia (or
Giarelora)", "Wudia? Giarelora", "Wudia not Giarelora", and glued: "Wudia,Giarelora",
"Wudia/Giarelora") scores only when every candidate contains a gold
(:func:`~coa_envs.rewards.em_f1.capped_score`; the separators are listed at
:func:`~coa_envs.rewards.em_f1.answer_parts`, and one a gold itself holds does not split); words
glued by punctuation count one each toward the cap. So a qualification set off by a separator
("Paris (France)", "Paris, France") scores like a second candidate: the separator cannot tell
them apart, and a policy trained on subem would learn to list candidates that way. What the cap
leaves: an answer of at most 2 x gold + 3 words that holds the gold still scores ("Wudia
Giarelora" for "Giarelora", names joined by nothing but a space), as it must for "the river
Thames in London"; train on EM, which pays for nothing extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coa_envs.rewards.em_f1 import capped_score, extract_answer, loose_tokens, normalize_answer
from coa_envs.types import RewardResult, Task

__all__ = ["VERSION", "SubExactMatch", "build", "sub_exact_match"]

VERSION = 4  # bump when the scores this term gives change (reported in reward_details)
# 2: answers longer than the length cap score 0 (a copied passage matched every gold); a list
#    of candidates scores only when every candidate matches
# 3: whole words by default (a glued "0123456789" held every one-digit gold); glued lists
#    ("A,B/C") split, and their words count toward the cap
# 4: more list separators split candidates ("A vs B", "A - B", "A (B)", "A? B", "A. B", "A -> B",
#    "A nor B", "A not B", "A rather than B"): within the cap they paid whichever one was the gold


def sub_exact_match(prediction: str, gold: str, word_boundary: bool = True) -> bool:
    """True when the normalised ``gold`` occurs inside the normalised ``prediction`` (as whole
    words unless ``word_boundary`` is false; see the module docstring)."""
    needle, haystack = normalize_answer(gold), normalize_answer(prediction)
    if not needle:
        return False
    if not word_boundary:
        return needle in haystack
    if f" {needle} " in f" {haystack} ":
        return True
    loose_needle = " ".join(loose_tokens(gold))
    return bool(loose_needle) and f" {loose_needle} " in f" {' '.join(loose_tokens(prediction))} "


@dataclass(frozen=True, slots=True)
class SubExactMatch:
    word_boundary: bool = True

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        answer = extract_answer(prediction or "")
        golds = [str(g) for g in task.gold]
        score, refusals = capped_score(lambda part, gold: sub_exact_match(part, gold, self.word_boundary),
                                       answer, golds, glued=True)
        matched = next((g for g in golds if sub_exact_match(answer, g, self.word_boundary)), None) if score else None
        details: dict[str, Any] = {"subem": score, "matched_gold": matched, "prediction": answer, "golds": golds,
                                   **refusals}
        return RewardResult(score, details)


def build(word_boundary: bool = True) -> SubExactMatch:
    """``reward: {name: subem}``; ``word_boundary: false`` is the seed's plain substring test."""
    if not isinstance(word_boundary, bool):
        raise ValueError(f"subem: word_boundary={word_boundary!r} is not valid; allowed: true or false")
    return SubExactMatch(word_boundary)
