"""Native function calling on the model side: render tools with the chat template, read the
tool calls a model wrote, and the exact text the template puts between turns.

Shared by ``coa serve`` (which answers ``tools`` requests with ``tool_calls``) and by
:class:`~agents.policy.LLMPolicy` in the ``tools`` protocol (which keeps episodes
token-exact: the sampled ids as sampled, and each observation's template text encoded by
itself). Parsing is transformers' own ``tokenizer.parse_response``: with the tokenizer's
``response_template`` when it ships one, else with :data:`HERMES_RESPONSE_TEMPLATE`, the
``<tool_call>{json}</tool_call>`` format of Qwen2.5/Hermes-style templates (and of the tiny
test model's template).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["HERMES_RESPONSE_TEMPLATE", "ToolTemplateError", "calls_delta", "observation_text", "parse_reply",
           "render_prompt", "supports_tools", "tool_call_opener", "wire_message"]

HERMES_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True,
                       "content": "json", "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


class ToolTemplateError(ValueError):
    """The model's chat template cannot do function calling (or not prefix-preservingly)."""


def supports_tools(tokenizer: Any) -> bool:
    """Whether the chat template renders a ``tools`` list (the usual sign of tool support)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return isinstance(template, str) and "tools" in template


def _template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: tool-call arguments as objects, not JSON text."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("content") is None:
            message["content"] = ""
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = dict(call.get("function") or {})
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    with contextlib.suppress(json.JSONDecodeError):  # else the template shows the text
                        function["arguments"] = json.loads(arguments) if arguments.strip() else {}
                calls.append({**call, "function": function})
            message["tool_calls"] = calls
        out.append(message)
    return out


def render_prompt(tokenizer: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                  *, add_generation_prompt: bool = True, continue_final_message: bool = False) -> str:
    """The chat template over ``messages`` with ``tools``; refuses a template without tool support."""
    if tools and not supports_tools(tokenizer):
        raise ToolTemplateError("the model's chat template does not render tools, so it cannot call functions; "
                                "use an env with protocol: tags, or a model whose template supports tools")
    return tokenizer.apply_chat_template(_template_messages(messages), tools=list(tools) if tools else None,
                                         tokenize=False, add_generation_prompt=add_generation_prompt,
                                         continue_final_message=continue_final_message)


def parse_reply(tokenizer: Any, text: str, prefix: str, tools: Sequence[Mapping[str, Any]] | None = None,
                call_prefix: str | None = None) -> dict[str, Any]:
    """The assistant message a model's generated ``text`` stands for (OpenAI shape: ``content``
    and ``tool_calls`` with JSON-text arguments and call ids). A call whose JSON cannot be
    read becomes a call without a name, which the env answers with a correction."""
    schema = getattr(tokenizer, "response_template", None) or HERMES_RESPONSE_TEMPLATE
    ids = call_prefix or f"call_{uuid.uuid4().hex[:12]}"
    try:
        parsed = tokenizer.parse_response(text, schema=schema, prefix=prefix)
    except ValueError as exc:
        raw = text.split("<tool_call>", 1)[-1].split("</tool_call>", 1)[0]
        return {"role": "assistant", "content": text.split("<tool_call>", 1)[0].strip() or None,
                "tool_calls": [{"id": f"{ids}_0", "type": "function",
                                "function": {"name": "", "arguments": raw, "error": str(exc).splitlines()[0]}}]}
    message: dict[str, Any] = {"role": "assistant", "content": (parsed.get("content") or "").strip() or None}
    calls = []
    for index, call in enumerate(parsed.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            function = {"name": "", "arguments": json.dumps(call)}
        arguments = function.get("arguments", {})
        calls.append({"id": f"{ids}_{index}", "type": "function",
                      "function": {"name": str(function.get("name") or ""),
                                   "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}})
    if calls:
        message["tool_calls"] = calls
    return message


def wire_message(message: Mapping[str, Any], parallel: bool | None = True) -> dict[str, Any]:
    """A message as the chat API sends it (drops parse notes such as a call's ``error``).
    ``parallel=False`` (a request's ``parallel_tool_calls: false``) keeps the first call only,
    as vLLM does: the client asked for at most one and would get every call the model wrote."""
    out = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
                             for c in message["tool_calls"][:None if parallel is not False else 1]]
    return out


def tool_call_opener(tokenizer: Any) -> str:
    """The text that starts a tool call in this model's replies ('' when unknown). A stream
    holds back everything from it on: that text becomes ``tool_calls``, not content."""
    schema = getattr(tokenizer, "response_template", None) or HERMES_RESPONSE_TEMPLATE
    field = (schema.get("fields") or {}).get("tool_calls") or {}
    return str(field.get("open") or "")


def calls_delta(calls: Sequence[Mapping[str, Any]], unsent_content: str) -> dict[str, Any]:
    """The stream delta that carries a reply's tool calls (each whole, with its ``index``, as
    OpenAI's clients accumulate them) and the content not yet sent before the first call."""
    delta: dict[str, Any] = {"content": unsent_content} if unsent_content else {}
    delta["tool_calls"] = [{"index": index, **call} for index, call in enumerate(calls)]
    return delta


def merge_call_deltas(calls: dict[int, dict[str, Any]], deltas: Sequence[Mapping[str, Any]] | None) -> None:
    """Fold one streamed delta's ``tool_calls`` into ``calls`` (by ``index``): the id when it
    comes, name and arguments as their pieces arrive, the way OpenAI's clients gather them."""
    for call in deltas or ():
        slot = calls.setdefault(call.get("index") or 0, {"id": "", "type": "function",
                                                          "function": {"name": "", "arguments": ""}})
        slot["id"] = call.get("id") or slot["id"]
        function = call.get("function") or {}
        slot["function"]["name"] += function.get("name") or ""
        slot["function"]["arguments"] += function.get("arguments") or ""


def observation_text(tokenizer: Any, history: Sequence[Mapping[str, Any]], reply: Mapping[str, Any],
                     results: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> str:
    """The text the template puts after the model's reply (which ended at its end-of-turn
    token) and before the next reply: the results' turns and the next generation prompt.
    Encoded by itself it extends the episode's ids exactly as the template would."""
    before = render_prompt(tokenizer, [*history, reply], tools, add_generation_prompt=False)
    after = render_prompt(tokenizer, [*history, reply, *results], tools, add_generation_prompt=True)
    if not after.startswith(before):
        raise ToolTemplateError("the chat template rewrites earlier turns when a turn is added (not "
                                "prefix-preserving), so a multi-turn episode cannot stay token-exact")
    eos = getattr(tokenizer, "eos_token", None) or ""
    cut = before.rfind(eos) + len(eos) if eos and eos in before else len(before)
    return after[cut:]
