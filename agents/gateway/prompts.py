"""The token ids a chat request is answered from, without re-tokenising the session's history.

An agent sends the whole conversation each call; re-tokenising it would move token
boundaries in the model's earlier replies (byte-level BPE merges differently when text is
encoded whole than when it was sampled token by token), so the trajectory's ids would no
longer be the ids the model sampled, and training would score tokens it never produced.
Two steps keep a session token-exact:

1. **The model's own replies stay as sampled.** An assistant message the client echoes back
   that is one of this session's replies (same text and calls; :func:`~agents.gateway.sessions.reply_key`)
   is rendered from the text the model actually wrote (its tool-call markup, a stop string,
   a merged token's extra characters) instead of the client's copy, which the template would
   re-format (JSON spacing of tool arguments, the stop string cut off).
2. **An earlier context is reused as ids.** When the rendered prompt starts with the text of
   an earlier call's context (its prompt + completion), the prompt is that context's ids
   followed by the encoding of the new text only: the tool results and the next generation
   prompt. The longest such context wins.

When neither applies (a template that drops earlier reasoning, an edited history, a
different system prompt), the prompt is encoded whole and the session's trajectory gets a
new token-exact segment there (:mod:`agents.gateway.assembly`), never re-tokenised text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.gateway.sessions import GatewaySession
from agents.openai_errors import APIError
from agents.openai_wire import flat_message
from agents.toolcalls import render_prompt, supports_tools

__all__ = ["CHAT_TEMPLATES", "PromptPlan", "build_prompt", "raw_reply_text", "resolve_chat_template"]


def _chatml_tools() -> str:
    from agents.tiny import CHATML_TEMPLATE

    return CHATML_TEMPLATE


#: Chat templates by name, for models whose own template lacks something an agent needs:
#: ``chatml-tools`` is ChatML with Hermes/Qwen2.5-style function calling (SmolLM2 and other
#: ChatML models render tools with it; the tiny test model ships it).
CHAT_TEMPLATES = {"chatml-tools": _chatml_tools}


def resolve_chat_template(spec: str) -> str:
    """A chat template from a name in :data:`CHAT_TEMPLATES` or a Jinja file's path."""
    if spec in CHAT_TEMPLATES:
        return CHAT_TEMPLATES[spec]()
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"chat template {spec!r}: neither a file nor one of {sorted(CHAT_TEMPLATES)}")
    return path.read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class PromptPlan:
    """What the engine is fed: ``ids`` encode ``text``; the first ``reused`` ids are an
    earlier context's, the rest the new text's encoding."""

    text: str
    ids: list[int]
    reused: int
    substituted: int
    """Assistant messages rendered from the model's sampled text."""


def raw_reply_text(completion_text: str, finish: str, eos_text: str) -> str:
    """The sampled text of a reply as its assistant message content: everything the model
    wrote, except the end-of-turn token the template adds itself."""
    if finish == "eos" and eos_text and completion_text.endswith(eos_text):
        return completion_text[: -len(eos_text)]
    return completion_text


def _with_sampled_replies(session: GatewaySession, messages: Sequence[Mapping[str, Any]],
                          keep_last: bool) -> tuple[list[dict[str, Any]], int]:
    out, substituted = [], 0
    for position, message in enumerate(messages):
        last = position == len(messages) - 1
        if message.get("role") == "assistant" and not (keep_last and last):
            raw = session.raw_reply(message)
            if raw is not None:
                out.append({"role": "assistant", "content": raw})
                substituted += 1
                continue
        out.append(flat_message(message))
    return out, substituted


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
            add_generation_prompt: bool, continue_final_message: bool) -> str:
    if tools or any(m.get("tool_calls") for m in messages):
        if tools and not supports_tools(tokenizer):
            raise APIError(400, "the chat template of this model does not render tools, so it cannot call "
                                   "functions; send the request without tools (or serve it with a chat template "
                                   "that renders them: coa gateway --chat-template FILE)", code="tools_unsupported",
                              param="tools")
        return render_prompt(tokenizer, messages, tools, add_generation_prompt=add_generation_prompt,
                             continue_final_message=continue_final_message)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                         continue_final_message=continue_final_message)


def build_prompt(tokenizer: Any, session: GatewaySession, messages: Sequence[Mapping[str, Any]],
                 tools: Sequence[Mapping[str, Any]] | None, *, add_generation_prompt: bool = True,
                 continue_final_message: bool = False, keep_sampled_replies: bool = True) -> PromptPlan:
    """Render ``messages`` (and ``tools``) with the chat template and pick the ids (see module doc)."""
    if not messages:
        raise APIError(400, "messages is empty", code="invalid_request", param="messages")
    add_generation_prompt = add_generation_prompt and not continue_final_message
    plain = [flat_message(m) for m in messages]
    rendered, substituted = plain, 0
    if keep_sampled_replies:
        rendered, substituted = _with_sampled_replies(session, messages, continue_final_message)
    try:
        text = _render(tokenizer, rendered, tools, add_generation_prompt, continue_final_message)
    except APIError:
        raise
    except Exception as exc:
        if not substituted:
            raise APIError(400, f"cannot render the chat template: {exc}", code="invalid_request",
                              param="messages") from None
        # Some templates insist on the structure the client sent (a tool message right after
        # an assistant message with tool_calls); render that instead.
        try:
            text = _render(tokenizer, plain, tools, add_generation_prompt, continue_final_message)
        except Exception as again:
            raise APIError(400, f"cannot render the chat template: {again}", code="invalid_request",
                              param="messages") from None
        substituted = 0
    best_text, best_ids = session.longest_context(text)
    rest = text[len(best_text):]
    ids = [*best_ids, *(tokenizer.encode(rest, add_special_tokens=False) if rest else [])]
    return PromptPlan(text=text, ids=ids, reused=len(best_ids), substituted=substituted)
