"""The filters of ``coa distill``: each says why a trajectory must not be training data, or None.

Pure functions of one trajectory (plus, for leakage, its task), applied in stages by
:mod:`trainers.distill.pipeline`; each returns a short reason that the report counts.

* :func:`correctness_reason` — finished with an answer and a reward of at least ``min_reward``:
  the point of distilling against a verifier.
* :func:`format_reason` — every turn is a valid CoA action (one tool call per turn, the
  answer last), and no malformed action had to be corrected by the env (SFT would teach the
  error along with the recovery).
* :func:`leak_reason` — the answer was not given away: not in the question, not in the
  metadata a teacher could read (the system prompt, the env's options), and not written by the
  teacher before any observation showed it (it knew the answer from outside the episode, e.g.
  the task's metadata). Only for envs whose answers are *looked up* with a retrieval tool (a
  registered tool whose ``SPEC.retrieves``); a math or code answer is derived, and its
  appearing early is no leak.
* :func:`limits_reason` — at most ``max_turns`` actions and ``max_chars`` characters.
* :func:`diversity_reason` — at least ``min_tools`` distinct tools and ``min_roles`` distinct
  role spans, so the data teaches a model to play several agents.
"""

from __future__ import annotations

import json
import re
from typing import Any

from coa_envs.protocol import parse_turn
from coa_envs.tools import retrieval_tools

__all__ = [
    "correctness_reason",
    "dedup_key",
    "diversity_reason",
    "format_reason",
    "leak_reason",
    "limits_reason",
    "turn_spans",
]


def correctness_reason(trajectory: Any, min_reward: float) -> str | None:
    if not trajectory.segments or not trajectory.response_text.strip():
        return "no_generation"
    if trajectory.status != "ok" or not trajectory.terminated:
        return "not_finished"
    if trajectory.reward < min_reward:
        return "below_reward"
    return None


def format_reason(trajectory: Any, allow_bad_actions: bool = False) -> str | None:
    if not allow_bad_actions and trajectory.tool_errors.get("action", 0):
        return "bad_action"
    generated = [segment for segment in trajectory.segments if segment.kind == "generated"]
    if not generated or trajectory.segments[-1].kind != "generated":
        return "no_final_answer"
    for number, segment in enumerate(generated, start=1):
        parsed = parse_turn(segment.text, allow_parallel=True)
        last = number == len(generated)
        if not parsed.ok:
            if allow_bad_actions and not last:  # kept with the env's correction after it
                continue
            return "bad_action"
        if last and parsed.answer is None:
            return "no_final_answer"
        if not last and (parsed.answer is not None or not parsed.tool_calls):
            return "bad_turn_order"
    return None


_TAG_RE = re.compile(r"</?[A-Za-z_][A-Za-z0-9_]*>")


def _mentions(text: str, normalised_golds: list[str]) -> bool:
    """Does ``text`` contain a gold answer as whole words (SQuAD-normalised both sides)? Tags
    become spaces first: normalisation drops ``<``, ``/`` and ``>``, which would glue a tag
    to the word beside it."""
    from coa_envs.rewards.em_f1 import normalize_answer

    padded = f" {normalize_answer(_TAG_RE.sub(' ', text))} "
    return any(f" {gold} " in padded for gold in normalised_golds)


def leak_reason(trajectory: Any, golds: tuple[str, ...] | list[str],
                env_tools: list[str] | tuple[str, ...]) -> str | None:
    """``leak:question``, ``leak:metadata`` or ``leak:before_evidence`` (see the module docstring)."""
    from coa_envs.rewards.em_f1 import normalize_answer

    if not retrieval_tools().intersection(env_tools):
        return None
    normalised = [g for g in (normalize_answer(str(gold)) for gold in golds) if g]
    if not normalised:
        return None
    user = [m.get("content", "") for m in trajectory.prompt_messages if m.get("role") == "user"]
    if not trajectory.prompt_messages:
        user = [trajectory.prompt_text]
    if any(_mentions(text, normalised) for text in user):
        return "leak:question"
    metadata = [json.dumps(trajectory.info.get("make_kwargs") or {}, ensure_ascii=False)]
    metadata += [m.get("content", "") for m in trajectory.prompt_messages if m.get("role") == "system"]
    if any(_mentions(text, normalised) for text in metadata):
        return "leak:metadata"
    segments = trajectory.segments
    final = max((i for i, s in enumerate(segments) if s.kind == "generated"), default=-1)
    for index, segment in enumerate(segments):
        if index == final:  # writing the answer in the last turn is what the last turn is for
            break
        if _mentions(segment.text, normalised):
            return None if segment.kind == "observation" else "leak:before_evidence"
    return None


def limits_reason(trajectory: Any, max_turns: int, max_chars: int) -> str | None:
    if max_turns and trajectory.num_turns > max_turns:
        return "too_many_turns"
    if max_chars and len(trajectory.response_text) > max_chars:
        return "too_long"
    return None


def turn_spans(trajectory: Any) -> tuple[set[str], set[str]]:
    """The distinct tools called and role spans written over the whole trajectory."""
    tools: set[str] = set()
    roles: set[str] = set()
    for segment in trajectory.segments:
        if segment.kind != "generated":
            continue
        parsed = parse_turn(segment.text, allow_parallel=True)
        tools.update(call.tool for call in parsed.tool_calls)
        roles.update(role.tag for role in parsed.roles)
    return tools, roles


def diversity_reason(trajectory: Any, min_tools: int, min_roles: int) -> str | None:
    tools, roles = turn_spans(trajectory)
    if len(tools) < min_tools:
        return "few_tools"
    if len(roles) < min_roles:
        return "few_roles"
    return None


def dedup_key(trajectory: Any) -> tuple[str, str, tuple[str, ...]]:
    """Same task, same generated text (whitespace-insensitive): one of them is enough."""
    texts = tuple(" ".join(s.text.split()) for s in trajectory.segments if s.kind == "generated")
    return trajectory.env_id, trajectory.task_id, texts
