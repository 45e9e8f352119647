"""One episode as the page shows it: turns of spans, observations, reward breakdown, mask.

The payload is plain JSON; the page builds DOM nodes from it with ``textContent`` only, so no
trajectory string is ever interpreted as markup (model output is untrusted). A *turn* is one
generated segment and the observation segments that follow it; each generated segment also
carries :func:`coa_envs.protocol.parse_turn`'s verdict, so a malformed action is flagged
where it happened.
"""

from __future__ import annotations

import math
from typing import Any

from agents.trajectory import Trajectory
from agents.viewer.records import Record
from agents.viewer.spans import split_spans
from coa_envs.protocol import parse_turn

__all__ = ["episode_payload", "jsonable", "unreadable_payload"]

_INFO_SHOWN_APART = ("reward_details", "reward_error")


def jsonable(value: Any) -> Any:
    """``value`` with NaN and infinities as strings: JSON has no such numbers, and a record
    that holds one (a NaN F1, a -inf logprob) must still display."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def _segment(trajectory: Trajectory, index: int) -> dict[str, Any]:
    segment = trajectory.segments[index]
    out: dict[str, Any] = {"segment": index, "kind": segment.kind, "spans": split_spans(segment.text),
                           "chars": len(segment.text), "tokens": len(segment.token_ids)}
    if segment.kind == "generated":
        parsed = parse_turn(segment.text)
        out["protocol_error"] = None if parsed.ok else {"kind": str(parsed.error.kind),
                                                         "message": parsed.error.message}
    return out


def _turns(trajectory: Trajectory) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for index, segment in enumerate(trajectory.segments):
        if segment.kind == "generated" or not turns:
            turns.append({"turn": len(turns) + 1, "generated": None, "observations": []})
        if segment.kind == "generated":
            turns[-1]["generated"] = _segment(trajectory, index)
        else:
            turns[-1]["observations"].append(_segment(trajectory, index))
    return turns


def _prompt(trajectory: Trajectory) -> dict[str, Any]:
    messages = [{"role": str(m.get("role", "?")), "content": str(m.get("content", ""))}
                for m in trajectory.prompt_messages if isinstance(m, dict)]
    return {"messages": messages, "text": trajectory.prompt_text if not messages else "",
            "tokens": len(trajectory.prompt_ids)}


def _mask_summary(trajectory: Trajectory) -> dict[str, Any]:
    """Counts of what trains; per segment characters when there are no token ids."""
    generated = [s for s in trajectory.segments if s.trainable]
    observed = [s for s in trajectory.segments if not s.trainable]
    has_ids = bool(trajectory.prompt_ids) or any(s.token_ids for s in trajectory.segments)
    return {
        "has_ids": has_ids, "complete_ids": trajectory.has_token_ids,
        "prompt_tokens": len(trajectory.prompt_ids),
        "generated_tokens": sum(len(s.token_ids) for s in generated),
        "observation_tokens": sum(len(s.token_ids) for s in observed),
        "generated_chars": sum(len(s.text) for s in generated),
        "observation_chars": sum(len(s.text) for s in observed),
    }


def episode_payload(record: Record, key: str, line: int, source: str) -> dict[str, Any]:
    """Everything the episode view shows except token pieces (fetched when the mask opens)."""
    trajectory = record.trajectory
    info = trajectory.info
    reward = trajectory.reward
    return jsonable({
        "key": key, "line": line, "source": source, "error": None,
        "env_id": trajectory.env_id, "task_id": trajectory.task_id, "status": record.status,
        "reward": None if math.isnan(reward) else reward, "terminated": trajectory.terminated,
        "truncated": trajectory.truncated, "answer": trajectory.answer, "seed": trajectory.seed,
        "sample_index": trajectory.sample_index, "tool_calls": trajectory.tool_calls,
        "tool_errors": trajectory.tool_errors,
        "reward_details": info.get("reward_details"), "reward_error": info.get("reward_error"),
        "info": {k: v for k, v in info.items() if k not in _INFO_SHOWN_APART},
        "prompt": _prompt(trajectory), "turns": _turns(trajectory), "mask": _mask_summary(trajectory),
        "unknown_fields": record.unknown,
    })


def unreadable_payload(key: str, line: int, source: str, error: str, raw: str) -> dict[str, Any]:
    """The episode view of a line that is not a trajectory: why, and its first bytes."""
    return {"key": key, "line": line, "source": source, "error": error, "raw": raw}
