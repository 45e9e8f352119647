"""Exact match for answers with several parts separated by ``|`` (the seed's MHQA EM).

Some questions have more than one answer ("Which two rivers ...?"), and some datasets store
a gold as one ``"A|B"`` string. The seed's EM splits the model's answer at ``|`` and scores
1 only when every part is a gold answer; this term does the same, in two modes:

* default: the gold aliases are pooled (each ``task.gold`` entry is also split at ``|``),
  and the answer scores 1 when it has at least one part and every part exactly matches
  (SQuAD normalisation) one of them: no wrong part may be added;
* ``require_all: true``: each ``task.gold`` entry is one *required* answer whose aliases
  are its ``|``-separated parts; the answer must name every required answer and nothing
  else (in any order), e.g. gold ``("Paris|City of Paris", "Lyon")`` accepts
  ``"lyon | paris"`` but not ``"paris"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coa_envs.rewards.em_f1 import extract_answer, normalize_answer
from coa_envs.types import RewardResult, Task

__all__ = ["VERSION", "MultiAnswerEM", "build", "split_answers"]

VERSION = 1  # bump when the scores this term gives change (reported in reward_details)


def split_answers(text: str, separator: str = "|") -> list[str]:
    """The non-empty parts of ``text`` between separators, stripped."""
    return [part.strip() for part in text.split(separator) if part.strip()]


@dataclass(frozen=True, slots=True)
class MultiAnswerEM:
    separator: str = "|"
    require_all: bool = False

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        parts = split_answers(extract_answer(prediction or ""), self.separator)
        normalised = [normalize_answer(p) for p in parts]
        # Each required answer is the set of its normalised aliases.
        required = [{normalize_answer(a) for a in split_answers(str(g), self.separator)} - {""}
                    for g in task.gold]
        required = [aliases for aliases in required if aliases]
        pooled = set().union(*required) if required else set()
        part_ok = [n in pooled for n in normalised]
        score = bool(parts) and all(part_ok)
        if self.require_all and score:
            covered = [any(n in aliases for n in normalised) for aliases in required]
            # Every required answer named, and no two parts naming the same one.
            score = all(covered) and len({self._which(n, required) for n in normalised}) == len(normalised)
        details: dict[str, Any] = {"parts": parts, "parts_matched": part_ok, "require_all": self.require_all,
                                   "golds": [str(g) for g in task.gold]}
        if not required:
            details["warning"] = "task has no gold answers; score is 0"
        return RewardResult(float(score), details)

    @staticmethod
    def _which(normalised_part: str, required: list[set[str]]) -> int:
        return next(i for i, aliases in enumerate(required) if normalised_part in aliases)


def build(separator: str = "|", require_all: bool = False) -> MultiAnswerEM:
    """``reward: {name: multi_em}``; see the module docstring for ``require_all``."""
    if not isinstance(separator, str) or not separator:
        raise ValueError(f"multi_em: separator={separator!r} is not valid; allowed: a non-empty string")
    if not isinstance(require_all, bool):
        raise ValueError(f"multi_em: require_all={require_all!r} is not valid; allowed: true or false")
    return MultiAnswerEM(separator, require_all)
