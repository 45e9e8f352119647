"""OpenAI's error conventions for our HTTP servers (``coa serve`` and any app that speaks its API).

Every error a client of an OpenAI-compatible server can get is one JSON shape,
``{"error": {"message", "type", "code", "param"}}``: the official ``openai`` client reads
``message`` into the exception it raises (``openai.NotFoundError: ... The model `gpt-4o` does
not exist``), where FastAPI's ``{"detail": ...}`` leaves it showing only "Error code: 400".
A request field the server does not implement is refused (400, ``unsupported_parameter``,
naming the field and what is supported) instead of being silently ignored, as a client that
asked for ``top_logprobs`` or ``response_format`` would otherwise get an answer that looks
right and is not.

:func:`install_error_handlers` routes FastAPI's own errors (a malformed body: 400 naming the
field, an unknown route: 404) into that shape; :func:`refuse_unsupported` checks a request
body's fields and :func:`check_streaming` its stream options. Nothing here knows about models or engines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["HARMLESS_FIELDS", "MESSAGE_ROLES", "NEUTRAL_FIELDS", "APIError", "check_messages", "check_prompt_fits",
           "check_streaming", "check_tools", "error_body", "install_error_handlers", "limit_body",
           "refuse_unpaired_surrogates", "refuse_unsupported"]

# Request fields that never change an answer: accepted and not acted on.
HARMLESS_FIELDS: tuple[str, ...] = ("user", "metadata", "store", "service_tier", "safety_identifier",
                                    "prompt_cache_key", "parallel_tool_calls", "request_id", "priority")
# Fields accepted only with the value that means "off" (anything else would be ignored).
NEUTRAL_FIELDS: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0), "repetition_penalty": (1, 1.0),
    "logit_bias": ({},), "response_format": ({"type": "text"},), "modalities": (["text"],),
    "min_tokens": (0,), "min_p": (0, 0.0), "suffix": ("",), "skip_special_tokens": (True,),
}

# HTTP status -> OpenAI's error ``type`` (their documented values).
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_denied_error",
          404: "invalid_request_error", 409: "conflict_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error"}


class APIError(Exception):
    """An error answered as ``{"error": {...}}`` with ``status`` (OpenAI's ``code`` strings:
    ``model_not_found``, ``unsupported_parameter``, ``context_length_exceeded``...)."""

    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def error_body(status: int, message: str, *, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """The body OpenAI's API (and vLLM's server) send with an error status."""
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "code": code, "param": param}}


def _location(loc: Iterable[Any]) -> str:
    """``("body", "messages", 0, "role")`` -> ``messages[0].role`` (the ``param`` of the error)."""
    text = ""
    for part in loc:
        if part == "body" and not text:
            continue
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


MAX_BODY_BYTES = 64 << 20  # a request body past this is a 413 before it is parsed


def limit_body(app: Any, limit: int = MAX_BODY_BYTES) -> None:
    """Refuse a request body over ``limit`` bytes with a 413 in OpenAI's shape before anything
    reads it into memory or parses it (a client could otherwise send gigabytes of JSON)."""
    import json

    from coa_envs.service.guards import BodyLimit

    def refusal(bytes_allowed: int) -> bytes:
        return json.dumps(error_body(413, f"the request body is over this server's limit of {bytes_allowed} bytes",
                                     code="request_too_large")).encode()

    app.add_middleware(BodyLimit, limit=limit, refusal=refusal)


def install_error_handlers(app: Any) -> None:
    """Answer every error of ``app`` in OpenAI's shape: :class:`APIError`, ``HTTPException``
    (incl. 404/405 for unknown routes) and request validation (400 naming the field)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    async def api_error(_request: Any, exc: APIError) -> Any:
        return JSONResponse(error_body(exc.status, exc.message, code=exc.code, param=exc.param),
                            status_code=exc.status)

    async def http_error(_request: Any, exc: HTTPException) -> Any:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    async def invalid(_request: Any, exc: RequestValidationError) -> Any:
        problems = exc.errors()
        first = problems[0] if problems else {}
        param = _location(first.get("loc", ()))
        message = "; ".join(f"{_location(p.get('loc', ())) or 'body'}: {p.get('msg')}" for p in problems[:5])
        return JSONResponse(error_body(400, f"invalid request: {message}", code="invalid_value",
                                       param=param or None), status_code=400)

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)


def refuse_unsupported(given: Mapping[str, Any], *, harmless: Iterable[str],
                       neutral: Mapping[str, tuple[Any, ...]], supported: Iterable[str]) -> None:
    """Raise a 400 :class:`APIError` for the first field of ``given`` (the body's fields that
    the request model does not declare) that would change the answer if honoured.

    ``harmless`` fields never change an answer (``user``, ``metadata``...) and are accepted;
    a ``neutral`` field is accepted only with one of its no-op values (``frequency_penalty: 0``,
    ``response_format: {"type": "text"}``); anything else is refused, naming ``supported``.
    """
    skip = set(harmless)
    for name, value in given.items():
        if name in skip or value is None:
            continue
        if name in neutral:
            if value in neutral[name]:
                continue
            if name == "response_format":
                _refuse_response_format(value)
            raise APIError(400, f"{name}={value!r} is not supported by this server (it would be ignored); "
                                f"send {name}={neutral[name][0]!r} or leave it out", code="unsupported_value",
                           param=name)
        raise APIError(400, f"unsupported parameter {name!r}: this server does not implement it, so it is refused "
                            f"rather than ignored; supported: {', '.join(sorted(supported))}",
                       code="unsupported_parameter", param=name)


def check_streaming(stream: bool | None, n: int | None, stream_options: Mapping[str, Any] | None, *,
                    several_choices: bool = False) -> None:
    """Refuse stream options we do not implement (``include_usage`` is the one), stream options
    without ``stream=true``, and, unless the server interleaves them (``several_choices``), a
    stream of more than one choice."""
    unknown = sorted(set(stream_options or {}) - {"include_usage"})
    if unknown:
        raise APIError(400, f"stream_options {unknown} are not supported; supported: include_usage",
                       code="unsupported_parameter", param=f"stream_options.{unknown[0]}")
    if stream_options and not stream:
        raise APIError(400, "stream_options is only allowed with stream=true", code="invalid_value",
                       param="stream_options")
    if stream and n != 1 and not several_choices:
        raise APIError(400, "stream supports n=1 only; send n=1 or stream=false", code="unsupported_value", param="n")


def refuse_unpaired_surrogates(body: Any) -> None:
    """A 400 naming the first string of a request body that holds a lone UTF-16 surrogate (JSON
    allows ``"\\ud800"``; it is no character, and the tokenizer, which needs UTF-8, failed on it
    with a 500). Walks dicts and lists without recursing (a body nests as deep as JSON lets it)."""
    pending: list[tuple[str, Any]] = [("", body)]
    while pending:
        param, value = pending.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")  # fails exactly on a surrogate (a JSON pair decodes to one character)
            except UnicodeEncodeError:
                raise APIError(400, f"{param or 'the request'} holds an unpaired UTF-16 surrogate (a \\ud800-"
                                    "\\udfff escape that is not half of a pair), which is not a character; send "
                                    "valid Unicode", code="invalid_value", param=param or None) from None
        elif isinstance(value, Mapping):
            for key, item in value.items():
                pending += [(param, key), (f"{param}.{key}" if param else str(key), item)]
        elif isinstance(value, list | tuple):
            pending += [(f"{param}[{index}]", item) for index, item in enumerate(value)]


def _refuse_response_format(value: Any) -> None:
    """Structured output is refused up front, with the way that works here. Honouring it takes
    constrained decoding (masking every token that would break the schema), which these servers
    do not do: an unconstrained reply checked afterwards fails after its tokens are spent, and a
    small model's free text rarely parses. Tools do work (the chat template renders them and the
    reply's calls come back parsed), which is what LangChain's ``method="function_calling"`` uses."""
    kind = value.get("type") if isinstance(value, Mapping) else value
    raise APIError(400, f"response_format type {kind!r} is not supported: this server does not constrain decoding "
                        "to a JSON schema, so the reply would not be guaranteed to match it. Ask for the structure "
                        "as a tool call instead (tools=[...]; LangChain: with_structured_output(schema, "
                        "method='function_calling')), or send response_format={'type': 'text'} or leave it out",
                   code="unsupported_value", param="response_format")


MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool")


def check_messages(messages: list[dict[str, Any]], *, text_only: bool = True) -> None:
    """OpenAI's rules a chat template relies on: a known role on every message, and content on
    every message but an assistant's (which may carry only tool calls); with ``text_only`` (a
    model served here, not a pass-through), only text content parts."""
    for number, message in enumerate(messages):
        role = message.get("role")
        if role not in MESSAGE_ROLES:
            raise APIError(400, f"messages[{number}].role is {role!r}; expected one of {', '.join(MESSAGE_ROLES)}",
                           code="invalid_value", param=f"messages[{number}].role")
        content = message.get("content")
        if content is None and role != "assistant":
            raise APIError(400, f"messages[{number}] ({role}) has no content", code="invalid_value",
                           param=f"messages[{number}].content")
        if not isinstance(content, str | list | None):
            raise APIError(400, f"messages[{number}].content must be a string or a list of content parts",
                           code="invalid_value", param=f"messages[{number}].content")
        for part_number, part in enumerate(content if isinstance(content, list) and text_only else ()):
            _check_part(part, f"messages[{number}].content[{part_number}]")


def _check_part(part: Any, where: str) -> None:
    """A content part must be text: the models served read text only, and an image, audio or
    file part dropped on the way to the chat template would get an answer that looks right."""
    kind = part.get("type") if isinstance(part, Mapping) else None
    if kind != "text":
        raise APIError(400, f"{where} is a {kind or type(part).__name__!r} part; this server's models read text "
                            "only (content parts of type 'text')", code="unsupported_value", param=where)
    if not isinstance(part.get("text"), str):
        raise APIError(400, f"{where} has no 'text' string", code="invalid_value", param=f"{where}.text")


def check_tools(tools: list[dict[str, Any]] | None, tool_choice: str | dict[str, Any] | None) -> None:
    """OpenAI's rules for ``tools`` and ``tool_choice``: function tools with a name, a choice of
    ``none``/``auto``, or ``required`` or a function among the tools (which need tools).
    Anything else would be dropped or rendered half, so the reply would not be what was asked."""
    names = []
    for number, tool in enumerate(tools or ()):
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, Mapping):
            raise APIError(400, f"tools[{number}] is of type {tool.get('type')!r}; this server serves function "
                                "tools only ({'type': 'function', 'function': {...}})", code="unsupported_value",
                           param=f"tools[{number}].type")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise APIError(400, f"tools[{number}].function has no name", code="invalid_value",
                           param=f"tools[{number}].function.name")
        names.append(function["name"])
    if tool_choice in (None, "none", "auto"):
        return
    if tool_choice == "required":
        if not tools:
            raise APIError(400, "tool_choice='required' needs tools", code="invalid_value", param="tool_choice")
        return
    if not isinstance(tool_choice, Mapping):
        raise APIError(400, f"tool_choice={tool_choice!r}: use 'auto', 'none', 'required' or "
                            "{'type': 'function', 'function': {'name': ...}}", code="invalid_value",
                       param="tool_choice")
    chosen = tool_choice.get("function") if tool_choice.get("type") == "function" else None
    name = chosen.get("name") if isinstance(chosen, Mapping) else None
    if name not in names:
        raise APIError(400, f"tool_choice names function {name!r}, which is not among the tools {names}",
                       code="invalid_value", param="tool_choice")


def check_prompt_fits(prompt_tokens: int, engine: Any, param: str = "messages") -> None:
    """A 400 ``context_length_exceeded`` for a prompt the engine's ``max_context`` (when it
    has one) cannot take. Streams check it first: once their 200 has gone out, the engine's
    own refusal can only be an error event, which clients raise without status or code."""
    limit = getattr(engine, "max_context", None)
    if isinstance(limit, int) and prompt_tokens >= limit:
        raise APIError(400, f"prompt has {prompt_tokens} tokens; the context limit is {limit}",
                       code="context_length_exceeded", param=param)
