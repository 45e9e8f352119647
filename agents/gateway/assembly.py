"""A finished session as :class:`~agents.trajectory.Trajectory` records: the model's own
tokens trainable, everything else (prompts, tool results, the template's scaffolding) not.

Calls are walked in the order they arrived. A call whose prompt ids start with the ids an
earlier *segment* ended on (its last prompt + completion) continues that segment: the new
prompt ids become an observation span (loss 0), the sampled ids a generated span (loss 1,
with their logprobs). Any other call starts a new segment whose prompt is its own prompt
ids, exactly as the engine was fed them. So a session is one trajectory when its template
is append-only, and several, each token-exact, when it is not (a template that drops
earlier reasoning, an edited or truncated history, a branch back to an earlier turn);
``info["gateway"]`` says which, and why each later segment started. Nothing is ever
re-tokenised here. ``info["gateway"]["finish_reasons"]`` has each call's finish reason;
``cut_calls`` the calls whose client hung up mid-reply (``abort``: the text ends where the
engine stopped, not where the model did), and a segment ending on one is ``truncated``.

Calls without token ids (a pass-through upstream that returned none) are assembled the same
way on messages instead of ids: text spans, no ids (trainers then tokenise span by span).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.gateway.sessions import GatewayCall, GatewaySession, reply_key
from agents.openai_wire import flat_message
from agents.trajectory import Trajectory

__all__ = ["reply_text", "session_trajectories"]


@dataclass
class _Segment:
    trajectory: Trajectory
    tip: list[Any]
    calls: list[int] = field(default_factory=list)
    reason: str | None = None
    common_prefix: int = 0


def reply_text(reply: Mapping[str, Any]) -> str:
    """An assistant reply as text when no sampled text exists: its content, then each call as
    ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` (the Hermes/Qwen markup)."""
    import json

    parts = [str(reply.get("content") or "")]
    for call in reply.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = function.get("arguments", "{}")
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        parts.append("<tool_call>\n" + json.dumps({"name": function.get("name", ""), "arguments": arguments},
                                                  ensure_ascii=False) + "\n</tool_call>")
    return "\n".join(p for p in parts if p)


def _plain(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    return [{"role": str(m.get("role", "")), "content": str(flat_message(m).get("content", ""))} for m in messages]


def _message_key(message: Mapping[str, Any]) -> tuple:
    return (message.get("role"), reply_key(message), message.get("tool_call_id"))


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _find(segments: list[_Segment], prompt: Sequence[Any]) -> _Segment | None:
    best = None
    for segment in segments:
        size = len(segment.tip)
        if size <= len(prompt) and (best is None or size > len(best.tip)) and list(prompt[:size]) == segment.tip:
            best = segment
    return best


def _why_new(prompt: Sequence[Any], earlier: list[list[Any]], prompts: list[list[Any]]) -> tuple[str, int]:
    """Why a call could not continue a segment: ``branch`` (it continues an earlier point of a
    segment, not its end: a retry from an earlier turn, or another sample of an earlier
    prompt), ``history_rewritten`` (its prompt leaves an earlier context part-way: the
    template dropped or changed earlier turns, or the client edited them) or
    ``new_conversation`` (nothing in common)."""
    if list(prompt) in prompts:
        return "branch", len(prompt)
    best = 0
    for context in earlier:
        if len(context) <= len(prompt) and list(prompt[:len(context)]) == context:
            return "branch", len(context)
        best = max(best, _common_prefix(prompt, context))
    return ("history_rewritten", best) if best else ("new_conversation", 0)


def _exact(calls: list[GatewayCall], tokenizer: Any, session: GatewaySession) -> list[_Segment]:
    segments: list[_Segment] = []
    contexts: list[list[int]] = []
    prompts: list[list[int]] = []
    for call in calls:
        segment = _find(segments, call.prompt_ids)
        if segment is None:
            reason, common = _why_new(call.prompt_ids, contexts, prompts) if segments else (None, 0)
            segment = _Segment(Trajectory(env_id=session.env_id, task_id=session.task_id,
                                          prompt_messages=_plain(call.messages), prompt_text=call.prompt_text,
                                          prompt_ids=list(call.prompt_ids)),
                               tip=[], reason=reason, common_prefix=common)
            segments.append(segment)
        else:
            new = call.prompt_ids[len(segment.tip):]
            if new:
                text = tokenizer.decode(new, skip_special_tokens=False) if tokenizer is not None else ""
                segment.trajectory.add_observation(text, new)
        segment.trajectory.add_generated(call.completion_text, call.completion_ids, call.logprobs)
        segment.tip = call.context_ids
        segment.calls.append(call.index)
        contexts.append(call.context_ids)
        prompts.append(list(call.prompt_ids))
    return segments


def _observation_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "".join(f"\n[{m.get('role')}] {flat_message(m).get('content', '')}" for m in messages)


def _text_only(calls: list[GatewayCall], session: GatewaySession) -> list[_Segment]:
    segments: list[_Segment] = []
    contexts: list[list[Any]] = []
    prompts: list[list[Any]] = []
    for call in calls:
        history = [_message_key(m) for m in call.messages]
        segment = _find(segments, history)
        if segment is None:
            reason, common = _why_new(history, contexts, prompts) if segments else (None, 0)
            segment = _Segment(Trajectory(env_id=session.env_id, task_id=session.task_id,
                                          prompt_messages=_plain(call.messages), prompt_text=call.prompt_text),
                               tip=[], reason=reason, common_prefix=common)
            segments.append(segment)
        else:
            new = call.messages[len(segment.tip):]
            if new:
                segment.trajectory.add_observation(_observation_text(new))
        segment.trajectory.add_generated(call.completion_text or reply_text(call.reply))
        segment.tip = [*history, _message_key({"role": "assistant", **call.reply})]
        segment.calls.append(call.index)
        contexts.append(segment.tip)
        prompts.append(history)
    return segments


def _apply_outcome(trajectory: Trajectory, outcome: Trajectory | None, session: GatewaySession) -> None:
    trajectory.seed = session.seed
    trajectory.sample_index = session.sample_index
    trajectory.info.update(session.info)
    if outcome is None:
        return
    trajectory.reward = outcome.reward
    trajectory.status = outcome.status
    trajectory.terminated = outcome.terminated
    trajectory.truncated = outcome.truncated
    trajectory.answer = outcome.answer
    trajectory.tool_calls = dict(outcome.tool_calls)
    trajectory.tool_errors = dict(outcome.tool_errors)
    for key in ("reward_details", "reward_error", "error", "wall_s", "tool_latency_s", "reward_source"):
        if key in outcome.info:
            trajectory.info[key] = outcome.info[key]


def session_trajectories(session: GatewaySession, tokenizer: Any = None,
                         outcome: Trajectory | None = None) -> list[Trajectory]:
    """The session's calls as trajectories (one per token-exact segment), each carrying the
    session's ``outcome`` (status, reward, answer, tool counts) and ``info["gateway"]``."""
    calls = session.snapshot()
    if not calls:
        empty = Trajectory(env_id=session.env_id, task_id=session.task_id)
        _apply_outcome(empty, outcome, session)
        empty.info["gateway"] = {"session_id": session.session_id, "calls": [], "segment": 0, "segments": 0,
                                 "layout": "empty", "tokens": "none"}
        return [empty]
    exact = all(call.has_ids for call in calls)
    segments = _exact(calls, tokenizer, session) if exact else _text_only(calls, session)
    layout = "append_only" if len(segments) == 1 else "split"
    out = []
    finish = {call.index: call.finish_reason for call in calls}
    for number, segment in enumerate(segments):
        trajectory = segment.trajectory
        _apply_outcome(trajectory, outcome, session)
        cut = [index for index in segment.calls if finish[index] == "abort"]
        if cut and cut[-1] == segment.calls[-1]:  # it ends on a reply its client never let finish
            trajectory.truncated = True
        trajectory.info["gateway"] = {
            "session_id": session.session_id, "segment": number, "segments": len(segments), "layout": layout,
            "tokens": "exact" if exact else "text_only", "calls": segment.calls,
            "split_reason": segment.reason, "common_prefix": segment.common_prefix,
            "reused_prompt_tokens": sum(c.reused_prompt_tokens for c in calls if c.index in segment.calls),
            "source": calls[0].source,
            "finish_reasons": [finish[index] for index in segment.calls], "cut_calls": cut,
        }
        response = trajectory.response_ids()
        trajectory.info["response_tokens"] = len(response) if response else None
        trajectory.info["response_chars"] = len(trajectory.response_text)
        out.append(trajectory)
    return out
