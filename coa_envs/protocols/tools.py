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
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ToolArgumentError",
    "arguments_to_query",
    "function_definition",
    "openai_tools",
    "query_to_arguments",
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
