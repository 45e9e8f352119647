"""Turn a multi-agent teacher run into one single-model CoA trajectory.

A teacher episode (:mod:`agents.teachers`) is recorded as the env saw it: bare actions (one
tool call per turn, then ``<answer>``) with the env's exact observations, plus the log of every
agent's contribution, each stamped with the action it precedes. Conversion writes those
contributions into the actions as role spans, in the order they happened::

    <plan>…</plan>            the manager's planning step
    <think>…</think>          a thought before a call, a delegated sub-question, a member's report
    <reflection>…</reflection>  the reflector's review of a delegated step
    <suggested_answer>…</suggested_answer>  an answer the manager proposed …
    <double_check>…</double_check>          … and the verifier's check of it
    <wiki_search>…</wiki_search> / <answer>…</answer>   the action itself, unchanged

Observations are left exactly as recorded, so the converted trajectory replays through the env
to the same observations and reward (``coa distill`` checks that for every kept trajectory).
A contribution that could not stand as a clean role span (it contains CoA tags itself) is left
out and counted, never repaired into something the agent did not write. Non-teacher
trajectories pass through unchanged.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from coa_envs.protocol import ROLE_TAGS, RoleSpan, parse_turn, render_turn

__all__ = ["ConversionError", "clean_role_span", "convert", "is_teacher_run"]


class ConversionError(ValueError):
    """The event log does not fit the recorded actions (a corrupt or hand-edited run)."""


def is_teacher_run(trajectory: Any) -> bool:
    teacher = trajectory.info.get("teacher")
    return isinstance(teacher, dict) and "events" in teacher


def clean_role_span(role: str, text: str) -> RoleSpan | None:
    """``RoleSpan(role, text)`` when it parses back as exactly that one span, else None."""
    text = text.strip()
    if role not in ROLE_TAGS or not text:
        return None
    span = RoleSpan(role, text)
    parsed = parse_turn(f"{render_turn([span])}\n<answer>-</answer>")
    if parsed.ok and parsed.roles == (span,) and parsed.answer == "-":
        return span
    return None


def _expected_action(event: dict[str, Any]) -> str:
    if event["kind"] == "answer":
        return f"<answer>{event['text']}</answer>"
    tool = event["detail"]["tool"]
    return f"<{tool}>{event['text']}</{tool}>"


def convert(trajectory: Any) -> Any:
    """A new trajectory with the teacher's role spans in its actions (see the module docstring)."""
    if not is_teacher_run(trajectory):
        return trajectory
    teacher = trajectory.info["teacher"]
    actions = [index for index, segment in enumerate(trajectory.segments) if segment.kind == "generated"]
    roles: dict[int, list[RoleSpan]] = {}
    counts: Counter[str] = Counter()
    dropped = unattached = 0
    for event in teacher["events"]:
        turn, kind = int(event["turn"]), event["kind"]
        if kind in ("tool", "answer"):
            if turn >= len(actions) or trajectory.segments[actions[turn]].text != _expected_action(event):
                raise ConversionError(f"{trajectory.task_id}: the {kind} event of turn {turn} does not match "
                                      "the recorded action")
            continue
        if turn >= len(actions):  # written after the episode's last action (it was cut off)
            unattached += 1
            continue
        span = clean_role_span(kind, event["text"])
        if span is None:
            dropped += 1
            continue
        spans = roles.setdefault(turn, [])
        if spans and spans[-1] == span:  # the same words twice in a row (a thought restated as a task)
            continue
        spans.append(span)
        counts[kind] += 1
    converted = copy.deepcopy(trajectory)
    converted.prompt_ids = []
    for turn, index in enumerate(actions):
        segment = converted.segments[index]
        spans = roles.get(turn)
        segment.text = f"{render_turn(spans)}\n{segment.text}" if spans else segment.text
        segment.token_ids, segment.logprobs = [], []
    for segment in converted.segments:  # the env's observations stay as recorded
        segment.token_ids = []
    summary = {key: value for key, value in teacher.items() if key != "events"}
    converted.info["teacher"] = summary
    converted.info["conversion"] = {"role_spans": dict(counts), "dropped_spans": dropped,
                                    "unattached_spans": unattached}
    return converted
