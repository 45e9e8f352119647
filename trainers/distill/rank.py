"""Which accepted trajectories to keep when there are more than the caps allow.

Two caps: ``max_per_task`` (easy tasks must not dominate) and a total ``budget``. Within
them, ``prefer`` orders the candidates:

* ``quality`` (default) — the trajectories that teach the most multi-agent behaviour first.
  The score (higher is better) counts, from the CoA text itself:

  ====================================================  ======
  error correction: a suggested answer before the last     +2.0
  turn or one that differs from the final answer (the
  verifier sent the team back), or a tool error the
  trajectory recovered from
  a ``<reflection>`` span                                  +1.0
  a ``<double_check>`` span                                +0.5
  each distinct role span kind                             +0.25
  each distinct tool                                       +0.25
  ====================================================  ======

  Ties go to fewer turns, then fewer generated characters, then the earlier record.
* ``shortest`` — fewest turns, then fewest generated characters, then the earlier record.
* ``first`` — the order the records were read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coa_envs.protocol import parse_turn
from trainers.distill.filters import turn_spans

__all__ = ["PREFERENCES", "Candidate", "quality_score", "select"]

PREFERENCES = ("quality", "shortest", "first")


def _normalised(text: str) -> str:
    return " ".join(text.lower().split())


def corrects_itself(trajectory: Any) -> bool:
    """Did the trajectory propose an answer it later revised, or recover from a tool error?"""
    if any(count for tool, count in trajectory.tool_errors.items() if tool != "action"):
        return True
    generated = [s for s in trajectory.segments if s.kind == "generated"]
    final = _normalised(trajectory.answer or "")
    for number, segment in enumerate(generated, start=1):
        for role in parse_turn(segment.text, allow_parallel=True).roles:
            if role.tag == "suggested_answer" and (number < len(generated) or _normalised(role.text) != final):
                return True
    return False


def quality_score(trajectory: Any) -> float:
    """The ``quality`` preference's score (see the module docstring)."""
    tools, roles = turn_spans(trajectory)
    return (2.0 * corrects_itself(trajectory) + 1.0 * ("reflection" in roles)
            + 0.5 * ("double_check" in roles) + 0.25 * len(roles) + 0.25 * len(tools))


@dataclass(frozen=True, slots=True)
class Candidate:
    """An accepted trajectory with what ranking needs, computed once."""

    trajectory: Any
    order: int
    score: float
    generated_chars: int

    @classmethod
    def of(cls, trajectory: Any, order: int) -> Candidate:
        chars = sum(len(s.text) for s in trajectory.segments if s.kind == "generated")
        return cls(trajectory, order, quality_score(trajectory), chars)

    def key(self, prefer: str) -> tuple[float, ...]:
        if prefer == "first":
            return (self.order,)
        turns = self.trajectory.num_turns
        if prefer == "shortest":
            return (turns, self.generated_chars, self.order)
        return (-self.score, turns, self.generated_chars, self.order)


def select(candidates: Iterable[Candidate], *, max_per_task: int, budget: int,
           prefer: str) -> tuple[list[Candidate], dict[str, int]]:
    """The kept candidates (grouped by task, best first) and how many each cap dropped."""
    if prefer not in PREFERENCES:
        raise ValueError(f"prefer={prefer!r} is not valid; allowed: {list(PREFERENCES)}")
    by_task: dict[tuple[str, str], list[Candidate]] = {}
    for candidate in candidates:
        by_task.setdefault((candidate.trajectory.env_id, candidate.trajectory.task_id), []).append(candidate)
    dropped = {"over_task_cap": 0, "over_budget": 0}
    kept: list[Candidate] = []
    for task in sorted(by_task):
        ranked = sorted(by_task[task], key=lambda c: c.key(prefer))
        keep = ranked if max_per_task == 0 else ranked[:max_per_task]
        dropped["over_task_cap"] += len(ranked) - len(keep)
        kept += keep
    if budget and len(kept) > budget:
        best = set(map(id, sorted(kept, key=lambda c: c.key(prefer))[:budget]))
        dropped["over_budget"] = len(kept) - budget
        kept = [c for c in kept if id(c) in best]
    return kept, {reason: count for reason, count in dropped.items() if count}
