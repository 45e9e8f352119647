"""One trajectory JSONL line, read for *display*: tolerant where training readers are strict.

:func:`agents.trajectory.Trajectory.from_dict` rejects unknown fields, which is right for a
trainer (a typo must not silently drop data) and wrong for a viewer (a file written by a
newer version, or with extra bookkeeping, must still open). So this module splits a record
into the fields :class:`~agents.trajectory.Trajectory` knows, which it builds through
``from_dict`` as every other reader does, and the rest, which the page shows as "fields this
viewer does not know". Anything that is not a trajectory at all (not JSON, a torn line, a
missing ``env_id``) raises :class:`UnreadableRecord` with a message a person can act on.

``status`` is read as a string whatever its shape: the old vocabulary (``ok``,
``truncated:max_turns``, ``error:timeout``, ``agent_error``, ...), a typed enum serialised to
its value, or an object such as ``{"kind": "error", "detail": "timeout"}``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from agents.trajectory import Segment, Trajectory

__all__ = ["Record", "RowSummary", "UnreadableRecord", "parse_record", "status_text", "summarize_record"]

_TRAJECTORY_FIELDS = frozenset(Trajectory.__dataclass_fields__)
_SEGMENT_FIELDS = frozenset(Segment.__dataclass_fields__)
_REQUIRED = ("env_id", "task_id")


class UnreadableRecord(ValueError):
    """A line that cannot be shown as a trajectory; the message says why."""


@dataclass(slots=True)
class Record:
    """A readable line: the trajectory, every field the dataclass has no slot for, and the
    status as written (what the page shows, whatever vocabulary the writer used)."""

    trajectory: Trajectory
    unknown: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"


@dataclass(slots=True)
class RowSummary:
    """What the episode list filters and sorts on (one row per line)."""

    env_id: str
    task_id: str
    status: str
    reward: float
    sample_index: int
    turns: int
    tokens: int
    chars: int
    tool_calls: int
    tool_errors: int
    has_ids: bool


def status_text(value: Any) -> str:
    """Any serialised episode status as one string (``kind:detail`` for structured ones)."""
    if value is None:
        return "unknown"
    if isinstance(value, str):
        return value or "unknown"
    if isinstance(value, dict):
        kind = value.get("kind") or value.get("status") or value.get("value") or "unknown"
        detail = value.get("detail") or value.get("reason")
        return f"{kind}:{detail}" if detail else str(kind)
    return str(getattr(value, "value", value))


def _number(name: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UnreadableRecord(f"{name} is {value!r}, not a number")
    try:
        return float(value)
    except ValueError:
        raise UnreadableRecord(f"{name} is {value!r}, not a number") from None


def _list_of(name: str, value: Any, kinds: tuple[type, ...], what: str, check_items: bool) -> list:
    if value is None:
        return []
    if not isinstance(value, list) or (
            check_items and not all(isinstance(v, kinds) and not isinstance(v, bool) for v in value)):
        raise UnreadableRecord(f"{name} is not a list of {what}")
    return value


def _counts(name: str, value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UnreadableRecord(f"{name} is {type(value).__name__}, not an object of counts")
    try:
        return {str(k): int(v) for k, v in value.items()}
    except (TypeError, ValueError):
        raise UnreadableRecord(f"{name} holds a count that is not a number") from None


def _segment(index: int, raw: Any, unknown: dict[str, Any], check_items: bool) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise UnreadableRecord(f"segments[{index}] is {type(raw).__name__}, not an object")
    for key in raw.keys() - _SEGMENT_FIELDS:
        unknown[f"segments[{index}].{key}"] = raw[key]
    text = raw.get("text")
    if not isinstance(text, str | None):
        raise UnreadableRecord(f"segments[{index}].text is {type(text).__name__}, not a string")
    return {
        "kind": str(raw.get("kind") or "generated"),
        "text": text or "",
        "token_ids": _list_of(f"segments[{index}].token_ids", raw.get("token_ids"), (int,), "token ids",
                              check_items),
        "logprobs": _list_of(f"segments[{index}].logprobs", raw.get("logprobs"), (int, float), "numbers",
                             check_items)
    }


def parse_record(line: bytes | str, check_items: bool = True) -> Record:
    """Parse one JSONL line; raise :class:`UnreadableRecord` when it is not a trajectory.

    ``check_items=False`` checks that token ids and logprobs are lists but not every item:
    indexing only counts them, and checking every id of a 100 MB file in Python made indexing
    about 1.5x slower. Showing an episode checks them all.
    """
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UnreadableRecord(f"not valid JSON ({exc.msg} at character {exc.pos}); "
                               "a torn or truncated line?") from None
    except UnicodeDecodeError:
        raise UnreadableRecord("not UTF-8 text") from None
    if not isinstance(data, dict):
        raise UnreadableRecord(f"a JSON {type(data).__name__}, not a trajectory object")
    missing = [key for key in _REQUIRED if not isinstance(data.get(key), str)]
    if missing:
        raise UnreadableRecord(f"not a trajectory: no {' or '.join(missing)} string")
    unknown = {key: data[key] for key in data.keys() - _TRAJECTORY_FIELDS}
    known = {key: data[key] for key in data.keys() & _TRAJECTORY_FIELDS}
    segments = known.get("segments") or []
    if not isinstance(segments, list):
        raise UnreadableRecord("segments is not a list")
    known["segments"] = [_segment(i, raw, unknown, check_items) for i, raw in enumerate(segments)]
    status = status_text(known.pop("status", "ok"))
    known["reward"] = _number("reward", known.get("reward"), math.nan)
    known["prompt_ids"] = _list_of("prompt_ids", known.get("prompt_ids"), (int,), "token ids", check_items)
    known["tool_calls"] = _counts("tool_calls", known.get("tool_calls"))
    known["tool_errors"] = _counts("tool_errors", known.get("tool_errors"))
    for name, kind, what in (("info", dict, "an object"), ("prompt_messages", list, "a list")):
        if known.get(name) is not None and not isinstance(known[name], kind):
            raise UnreadableRecord(f"{name} is {type(known[name]).__name__}, not {what}")
    if known.get("sample_index") is not None:
        known["sample_index"] = int(_number("sample_index", known["sample_index"], 0))
    if "prompt_text" in known and not isinstance(known["prompt_text"], str):
        known["prompt_text"] = str(known["prompt_text"])
    fields = {k: v for k, v in known.items() if v is not None or k == "answer"}
    try:
        trajectory = Trajectory.from_dict({**fields, "status": status})
    except (TypeError, ValueError) as exc:
        try:  # a status outside the dataclass's vocabulary (older or newer writer): keep it as text
            trajectory = Trajectory.from_dict(fields)
        except (TypeError, ValueError):
            raise UnreadableRecord(f"not a trajectory: {exc}") from None
    return Record(trajectory, unknown, status)


def summarize_record(record: Record) -> RowSummary:
    """The list row of one readable record."""
    trajectory = record.trajectory
    return RowSummary(
        env_id=trajectory.env_id,
        task_id=trajectory.task_id,
        status=record.status,
        reward=trajectory.reward,
        sample_index=int(trajectory.sample_index or 0),
        turns=trajectory.num_turns,
        tokens=sum(len(s.token_ids) for s in trajectory.segments),
        chars=sum(len(s.text) for s in trajectory.segments),
        tool_calls=sum(trajectory.tool_calls.values()),
        tool_errors=sum(trajectory.tool_errors.values()),
        has_ids=bool(trajectory.prompt_ids) or any(s.token_ids for s in trajectory.segments),
    )
