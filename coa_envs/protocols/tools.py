"""Function calling: each tool as a JSON-schema function, and call arguments back to a query.

A CoA tool takes one string (the query the tag protocol puts between its tags); as a
function it takes one string parameter, named and described by the tool's own
:class:`~coa_envs.types.ToolSpec` (``code`` takes ``code``, the others a ``query``). The
same definitions serve the OpenAI ``tools`` list and the MCP ``tools/list`` answer, so a
tool is described once whatever the caller.

Tools from an external MCP server come with their own schema. The rule that maps any
definition to the one query string a tool runs on: a function whose only parameter is a
required string takes that string as its query; any other takes the JSON text of its
arguments object (checked against the schema first).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from coa_envs.protocol import MAX_TURN_CHARS, ParsedTurn, ProtocolError, ProtocolErrorKind, ToolCall

__all__ = [
    "ParsedMessage",
    "ToolArgumentError",
    "arguments_to_query",
    "as_message",
    "function_definition",
    "openai_tools",
    "parse_message",
    "query_to_arguments",
    "render_tool_messages",
    "string_parameter",
]


class ToolArgumentError(ValueError):
    """A call's arguments do not match the tool's schema; the message is fit for the model."""


def function_definition(name: str) -> dict[str, Any]:
    """The OpenAI ``function`` object (``name``, ``description``, ``parameters``) of tool ``name``,
    from the :class:`~coa_envs.types.ToolSpec` its module owns."""
    from coa_envs.tools import tool_spec

    spec = tool_spec(name)
    return {
        "name": spec.name,
        "description": spec.summary,
        "parameters": {
            "type": "object",
            "properties": {spec.parameter: {"type": "string", "description": spec.argument}},
            "required": [spec.parameter],
            "additionalProperties": False,
        },
    }


def openai_tools(definitions: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The chat API's ``tools`` list for these function definitions."""
    return [{"type": "function", "function": dict(definition)} for definition in definitions]


def string_parameter(definition: Mapping[str, Any]) -> str | None:
    """The name of the function's one parameter when that is a required string, else None."""
    schema = definition.get("parameters") or {}
    properties = schema.get("properties") or {}
    if len(properties) != 1:
        return None
    (name, spec), = properties.items()
    if (spec or {}).get("type") == "string" and name in (schema.get("required") or ()):
        return name
    return None


def _check(definition: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    schema = definition.get("parameters") or {"type": "object"}
    name = definition.get("name", "the tool")
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema comes with the mcp extra
        missing = [p for p in schema.get("required") or () if p not in arguments]
        if missing:
            raise ToolArgumentError(f"{name} needs {missing}") from None
        return
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(dict(arguments)), key=lambda e: list(e.path))
    if errors:
        where = ".".join(str(p) for p in errors[0].path)
        raise ToolArgumentError(f"{name}: {(where + ': ') if where else ''}{errors[0].message}")


def arguments_to_query(definition: Mapping[str, Any], arguments: Any) -> str:
    """The query string a call's arguments stand for; raises :class:`ToolArgumentError` with
    a message that tells the model what the schema wanted."""
    name = definition.get("name", "the tool")
    parameter = string_parameter(definition)
    if isinstance(arguments, str):  # the chat API sends arguments as JSON text
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolArgumentError(f"the arguments of {name} are not valid JSON ({exc.msg})") from None
    if not isinstance(arguments, Mapping):
        example = f'{{"{parameter}": "..."}}' if parameter else "an object"
        raise ToolArgumentError(f"the arguments of {name} must be a JSON object like {example}")
    if parameter is None:
        _check(definition, arguments)
        return json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True)
    extra = sorted(set(arguments) - {parameter})
    if extra:
        raise ToolArgumentError(f"{name} takes only {parameter!r}; unexpected argument(s) {extra}")
    value = arguments.get(parameter)
    if not isinstance(value, str):
        got = "missing" if value is None else f"a {type(value).__name__}"
        raise ToolArgumentError(f"{name} needs {parameter!r} as a string (got {got})")
    if not value.strip():
        raise ToolArgumentError(f"{name}: {parameter!r} is empty")
    return value


def query_to_arguments(definition: Mapping[str, Any], query: str) -> dict[str, Any]:
    """The inverse of :func:`arguments_to_query`: the arguments object a query stands for."""
    parameter = string_parameter(definition)
    if parameter is not None:
        return {parameter: query}
    name = definition.get("name", "the tool")
    try:
        arguments = json.loads(query)
    except json.JSONDecodeError as exc:
        raise ToolArgumentError(f"{name} takes a JSON object of arguments ({exc.msg})") from None
    if not isinstance(arguments, dict):
        raise ToolArgumentError(f"{name} takes a JSON object of arguments")
    _check(definition, arguments)
    return arguments


# -- the protocol: an assistant message in, tool messages out ----------------------------------
class ParsedMessage(NamedTuple):
    """One assistant message, read as the env reads a turn.

    ``turn`` has the tag protocol's shape (tool calls, answer, error) so the env runs both
    protocols through one code path; ``call_ids`` and ``call_errors`` are aligned with
    ``turn.tool_calls`` (an error is a call whose arguments failed the schema: it gets that
    message instead of running); ``text`` is the message as JSON (transcript and budget).
    """

    turn: ParsedTurn
    call_ids: tuple[str, ...] = ()
    call_errors: tuple[str | None, ...] = ()
    text: str = ""


_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S)


def _content_text(content: Any) -> str | None:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return None


def _failed(kind: ProtocolErrorKind, message: str, ids: Sequence[str] = (), names: Sequence[str] = (),
            text: str = "") -> ParsedMessage:
    calls = tuple(ToolCall(name, "") for name in names)
    return ParsedMessage(ParsedTurn(tool_calls=calls, error=ProtocolError(kind, message)), tuple(ids),
                         tuple(None for _ in ids), text)


def as_message(action: Any) -> dict[str, Any] | str:
    """The assistant message an action stands for, or the reason it stands for none. A plain
    string is the content of a message without tool calls; a JSON string of an assistant
    message object (what a text-only pipeline carries) is that message."""
    if isinstance(action, str):
        stripped = action.lstrip()
        if stripped.startswith("{"):
            try:
                decoded = json.loads(action)
            except json.JSONDecodeError:
                decoded = None
            if isinstance(decoded, dict) and decoded.get("role") == "assistant":
                return decoded
        return {"role": "assistant", "content": action}
    if isinstance(action, Mapping):
        if action.get("role", "assistant") != "assistant":
            return f"the action must be an assistant message (role 'assistant'), not role {action.get('role')!r}"
        return dict(action)
    return "the action must be an assistant message: an object with content and/or tool_calls, or text"


def parse_message(action: Any, definitions: Mapping[str, Mapping[str, Any]], *,
                  allow_parallel: bool = False) -> ParsedMessage:
    """Read one assistant message. Never raises: problems come back as the turn's error
    (the whole message is refused) or as one call's error (only that call is refused)."""
    message = as_message(action)
    if isinstance(message, str):
        return _failed(ProtocolErrorKind.INVALID_TEXT, message)
    try:
        text = json.dumps(message, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return _failed(ProtocolErrorKind.INVALID_TEXT, "the message is not JSON-serialisable")
    if len(text) > MAX_TURN_CHARS:
        return _failed(ProtocolErrorKind.TOO_LONG, f"the message has {len(text)} characters; the limit is "
                                                   f"{MAX_TURN_CHARS}", text=text)
    content = _content_text(message.get("content"))
    if content is None:
        return _failed(ProtocolErrorKind.INVALID_TEXT, "content must be text or a list of text parts", text=text)
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        return _failed(ProtocolErrorKind.INVALID_TEXT, "tool_calls must be a list", text=text)
    ids, names, queries, errors = [], [], [], []
    for index, call in enumerate(raw_calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            return _failed(ProtocolErrorKind.INVALID_TEXT, f"tool_calls[{index}] has no function name "
                                                           '(expected {"type": "function", "function": '
                                                           '{"name": ..., "arguments": ...}})', text=text)
        ids.append(str(call.get("id") or f"call_{index}"))
        names.append(name)
        definition = definitions.get(name)
        try:
            query = arguments_to_query(definition, function.get("arguments")) if definition else \
                json.dumps(function.get("arguments"))
            error = None
        except ToolArgumentError as exc:
            query, error = "", f"Invalid arguments: {exc}."
        queries.append(query)
        errors.append(error)
    if len(ids) > 1 and not allow_parallel:
        return _failed(ProtocolErrorKind.MULTIPLE_TOOLS, f"{len(ids)} tool calls in one message; make exactly "
                                                         "one call and wait for its result", ids, names, text)
    if ids:
        calls = tuple(ToolCall(n, q) for n, q in zip(names, queries, strict=True))
        return ParsedMessage(ParsedTurn(tool_calls=calls, spans=tuple(names)), tuple(ids), tuple(errors), text)
    found = _ANSWER_RE.findall(content)
    answer = (found[-1] if found else content).strip()
    if not answer:
        return _failed(ProtocolErrorKind.NO_ACTION, "the message has no tool call and no answer; call a "
                                                    "function or give the final answer", text=text)
    return ParsedMessage(ParsedTurn(answer=answer, spans=("answer",)), text=text)


def render_tool_messages(ids: Sequence[str], names: Sequence[str], texts: Sequence[str]) -> str:
    """The observation (a JSON list of messages): one ``tool`` message per call, answering its
    call id; with no call ids, one ``user`` message (a correction that answers no call)."""
    if not ids:
        return json.dumps([{"role": "user", "content": "\n\n".join(texts)}], ensure_ascii=False)
    messages = [{"role": "tool", "tool_call_id": i, "name": n, "content": t}
                for i, n, t in zip(ids, names, texts, strict=True)]
    return json.dumps(messages, ensure_ascii=False)
