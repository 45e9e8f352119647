"""Exact match and token F1 for open-domain and multi-hop QA.

The score is exact match (EM) after SQuAD v1.1 answer normalisation, taken as the best
over every gold alias -- the reward the multi-hop QA papers (and the CoA seed) train with.
Token F1 is reported in ``details`` as a secondary metric, in both the SQuAD v1.1 form and
the HotpotQA form (identical except that a yes/no/noanswer prediction or gold only scores
when the other side is the same word). The definitions follow the official evaluation
scripts exactly; ``tests/mhqa/test_mhqa_em_f1.py`` pins them on a table of tricky cases.

Two refusals, because a policy optimises whatever the reward pays for:

* a gold alias that normalises to nothing (``")"``, ``"A+"``: punctuation and articles) never
  matches: under the official scripts every answer that also normalises to nothing
  ("The.") would equal it. Loaders drop such aliases too (:mod:`coa_envs.tasks.hygiene`);
* F1 pays for overlap, so a list of candidates or a copied passage earns partial credit. The
  F1 this term scores (``metric: f1``, ``details["f1"]``) is 0 for an answer longer than
  :func:`length_cap` tokens (2 x the longest gold + 3, after normalisation), and an answer that
  enumerates candidates (", ", ";", "|", "/", " or ", " nor ", " and ", " & ", " vs ", a spaced
  dash or an en/em dash, brackets, "?", "!", a full stop after a word, arrows and bullets, one
  per line, or a candidate named to be denied: "A not B", "A rather than B") scores its worst
  candidate (:func:`capped_score`); a separator a gold itself holds does not split. The
  official, uncapped figures stay in ``details`` (``f1_official``, ``hotpot_f1``) for comparison
  with published numbers. Within the cap F1
  still gives partial credit for shared words (even "of"): it is a metric, train on EM.

This module must stay pure and dependency-free: rewards run inside env steps.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from coa_envs.types import RewardResult, Task

__all__ = [
    "VERSION",
    "EmF1Reward",
    "answer_parts",
    "build",
    "capped_score",
    "exact_match",
    "extract_answer",
    "f1_score",
    "hotpot_f1",
    "length_cap",
    "loose_tokens",
    "max_over_golds",
    "normalize_answer",
]

VERSION = 3  # bump when the scores this term gives change (reported in reward_details)
# 2: golds that normalise to nothing never match; the scored F1 is 0 beyond the length cap
# 3: the scored F1 splits candidates at more separators ("vs", a spaced dash, brackets, "?", a
#    sentence's full stop, arrows, "nor", "not"/"rather than"): each part must be right

CAP_FACTOR, CAP_SLACK = 2, 3  # an answer may have 2 x the longest gold's tokens + 3

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_SPECIAL_HOTPOT = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lower-case, drop ASCII punctuation, drop a/an/the, squeeze spaces.

    The order (lower, punctuation, articles, whitespace) matters and is the official one:
    "The" is only removed as an article after lower-casing, and "a.b" becomes "ab".
    Only ASCII punctuation (``string.punctuation``) is removed, so curly quotes and other
    unicode marks survive -- exactly like the official script.
    """
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punct)
    return " ".join(no_articles.split())


def exact_match(prediction: str, gold: str) -> bool:
    """True when both sides normalise to the same, non-empty string."""
    normalised = normalize_answer(gold)
    return bool(normalised) and normalize_answer(prediction) == normalised


def length_cap(golds: Iterable[str]) -> int:
    """The most tokens (after normalisation) an answer may have to earn F1 or sub-string credit:
    ``2 x`` the longest gold + 3 ("the river Thames in London" for "Thames" fits; a copied
    passage or a list of the page's names does not)."""
    longest = max((len(normalize_answer(str(g)).split()) for g in golds), default=0)
    return CAP_FACTOR * longest + CAP_SLACK


_LIST_SEPARATORS = {  # how answers enumerate candidates; a separator some gold itself contains is kept
    ";": r";", "|": r"\|", "newline": r"\n", "tab": r"\t", "comma": r",\s", "slash": r"\s/\s", "or": r"\bn?or\b",
    "and": r"\band\b", "plus": r"\s[&+]\s",
    # "Paris vs Lyon", "Paris - Lyon", "Paris (or Lyon)", "Paris? Lyon?", "Paris. Lyon", "Paris -> Lyon"
    "versus": r"\bvs\b\.?|\bversus\b", "dash": r"\s-+\s|[\u2012-\u2015]", "bracket": r"[()\[\]{}]",
    "exclamation": r"[?!]", "sentence": r"(?<=[^\W\d_]{4})\.\s", "marks": r"->|=>|[~\u2026\u2022\u00b7\u2190-\u21ff]",
    "wide": r"[\u3001\u3002\uff0c\uff1b\uff0f]",
    # "Paris not Lyon", "Paris rather than Lyon": a second candidate named to be denied
    "denial": r"\b(?:not|but|rather than|instead of|except|unlike)\b",
}


# glued lists ("Wudia,Giarelora/Repae&Lyon"): a separator between two letters, as sub-string
# matching reads them (``glued=True``); "1,000" and "1/2" keep their digits together
_GLUED_SEPARATORS = {"glued": r"(?<=[^\W\d_])\s*[,/&+|]\s*(?=[^\W\d_])"}


def answer_parts(answer: str, golds: Iterable[str], glued: bool = False) -> list[str]:
    """The candidates an answer enumerates ("Wudia, Giarelora or Repae" -> three; "Wudia vs
    Giarelora", "Wudia (or Giarelora)", "Wudia - Giarelora", "Wudia not Giarelora" -> two), or the
    answer itself. A separator that occurs in a gold (", " in "Washington, D.C.", " and " in "Tom
    and Jerry", "(" in "Queen (band)") does not split. ``glued``: also split at ``, / & + |``
    written between two letters without spaces ("Wudia,Giarelora")."""
    lowered = [f" {str(g).lower()} " for g in golds]
    separators = {**_LIST_SEPARATORS, **(_GLUED_SEPARATORS if glued else {})}
    kinds = [pattern for kind, pattern in separators.items()
             if not any(re.search(pattern, g if kind != "newline" else g.strip()) for g in lowered)]
    if not kinds:
        return [answer]
    parts = [p.strip() for p in re.split("|".join(kinds), answer, flags=re.IGNORECASE)]
    parts = [p for p in parts if normalize_answer(p)]
    return parts or [answer]


def loose_tokens(text: str) -> list[str]:
    """``text``'s words with punctuation read as a space ("Wudia,Giarelora" is two words, where
    :func:`normalize_answer` glues it into one), lower-cased, articles dropped."""
    spaced = "".join(" " if ch in _PUNCTUATION else ch for ch in text.lower())
    return _ARTICLES.sub(" ", spaced).split()


def capped_score(metric: Any, answer: str, golds: Sequence[str], glued: bool = False) -> tuple[float, dict[str, Any]]:
    """``metric`` (best over golds) as a reward a policy cannot raise by hedging: 0 beyond
    :func:`length_cap` tokens; an answer that enumerates candidates scores its *worst* part
    (every candidate listed must be right). Returns the score and what was refused. ``glued``
    (for sub-string matching, which finds a gold inside a glued word): words joined by
    punctuation count one each toward the cap, and glued lists split (:func:`answer_parts`)."""
    tokens, cap = len(normalize_answer(answer).split()), length_cap(golds)
    if glued:
        tokens = max(tokens, len(loose_tokens(answer)))
    parts = answer_parts(answer, golds, glued)
    details: dict[str, Any] = {"answer_tokens": tokens, "length_cap": cap, "over_length_cap": tokens > cap}
    if len(parts) > 1:
        details["candidates"] = parts[:10]
    if tokens > cap or not golds:
        return 0.0, details
    return min(max_over_golds(metric, part, golds) for part in parts), details


def _token_f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(prediction_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, gold: str) -> float:
    """SQuAD v1.1 token F1 over normalised whitespace tokens (0 when nothing overlaps)."""
    return _token_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def hotpot_f1(prediction: str, gold: str) -> float:
    """HotpotQA answer F1: SQuAD F1, but yes/no/noanswer only score against the same word."""
    norm_pred = normalize_answer(prediction)
    norm_gold = normalize_answer(gold)
    if norm_pred in _SPECIAL_HOTPOT and norm_pred != norm_gold:
        return 0.0
    if norm_gold in _SPECIAL_HOTPOT and norm_pred != norm_gold:
        return 0.0
    return _token_f1(norm_pred.split(), norm_gold.split())


def max_over_golds(metric: Any, prediction: str, golds: Iterable[str]) -> float:
    """Best metric value over every gold alias (0.0 when there is no gold), as SQuAD does."""
    return max((float(metric(prediction, gold)) for gold in golds), default=0.0)


def extract_answer(prediction: str) -> str:
    """The answer text: the env passes the content of ``<answer>``; a full action is tolerated.

    When the text still contains ``<answer>...</answer>`` (a caller passing the whole
    model turn), the last such span is used, as the CoA protocol takes the final answer.
    """
    spans = _ANSWER_TAG.findall(prediction)
    return spans[-1].strip() if spans else prediction.strip()


@dataclass(frozen=True, slots=True)
class EmF1Reward:
    """EM (or F1, when ``metric="f1"``) of the prediction against ``task.gold``."""

    metric: str = "em"

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        answer = extract_answer(prediction or "")
        golds = tuple(str(gold) for gold in task.gold if normalize_answer(str(gold)))
        em = max_over_golds(exact_match, answer, golds)
        capped_f1, refusals = capped_score(f1_score, answer, golds)
        details: dict[str, Any] = {
            "em": em,
            "f1": capped_f1,
            "f1_official": max_over_golds(f1_score, answer, golds),
            "hotpot_f1": max_over_golds(hotpot_f1, answer, golds),
            **refusals,
            "prediction": answer,
            "normalized_prediction": normalize_answer(answer),
            "golds": list(golds),
        }
        if len(golds) < len(task.gold):
            details["refused_golds"] = [str(g) for g in task.gold if not normalize_answer(str(g))]
        if not golds:
            details["warning"] = "task has no gold answer (none that normalises to text); score is 0"
        return RewardResult(score=em if self.metric == "em" else details["f1"], details=details)


def build(metric: str = "em", **config: Any) -> EmF1Reward:
    """Registry hook. ``metric`` picks the score: ``em`` (default, the paper's reward) or ``f1``."""
    if config:
        raise TypeError(f"em_f1 reward: unknown options {sorted(config)} (known: metric)")
    if metric not in ("em", "f1"):
        raise ValueError(f"em_f1 reward: metric must be 'em' or 'f1', not {metric!r}")
    return EmF1Reward(metric=metric)
