"""The Chain-of-Agents tag grammar: parse one model turn, render observations, stop strings.

A turn is a sequence of top-level spans ``<tag>…</tag>``. Role spans (think, plan, …) carry
reasoning, tool spans carry one query for a tool agent, ``<answer>`` ends the episode.
The environment alone writes ``<observation>`` spans.

The tags are the vocabulary's (:mod:`coa_envs.vocabulary`, re-exported here); the tool tags
are the registered tools: registering a tool makes its tag parse, stop generation and appear
in :func:`describe_tool` listings, with no edit here. Parsing never raises: a malformed turn
comes back as a :class:`ParsedTurn` whose ``error`` is a typed :class:`ProtocolError`, which
the env turns into a corrective observation. Span contents are opaque text, except that a CoA
tag opening inside a span is reported as nesting (``<code>`` is fully opaque until
``</code>`` so programs may print any string).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum
from typing import NamedTuple

from coa_envs.types import ToolSpec
from coa_envs.vocabulary import (
    ANSWER_TAG,
    BUILTIN_TOOLS,
    OBSERVATION_TAG,
    RESERVED_TAGS,
    ROLE_TAGS,
    tool_names,
)

__all__ = [
    "ANSWER_TAG",
    "MAX_TURN_CHARS",
    "OBSERVATION_TAG",
    "RESERVED_TAGS",
    "ROLE_TAGS",
    "STOP_STRINGS",
    "TOOL_TAGS",
    "ParsedTurn",
    "ProtocolError",
    "ProtocolErrorKind",
    "RoleSpan",
    "ToolCall",
    "describe_tool",
    "parse_turn",
    "render_observation",
    "render_turn",
    "stop_strings",
    "strip_code_fence",
    "tool_tags",
]

TOOL_TAGS: tuple[str, ...] = BUILTIN_TOOLS  # the built-in tools; tool_tags() adds registered ones
tool_tags = tool_names  # every registered tool tag (the grammar below follows it)

# A realistic turn is a few kB; anything this large is degenerate output, not an action.
MAX_TURN_CHARS = 65_536


def stop_strings(tools: Sequence[str] | None = None) -> tuple[str, ...]:
    """Generation stops right after a tool call closes (the env must answer it) or at the answer.

    ``tools`` defaults to every registered tool."""
    return (*(f"</{tool}>" for tool in (tool_tags() if tools is None else tools)), f"</{ANSWER_TAG}>")


STOP_STRINGS: tuple[str, ...] = stop_strings(TOOL_TAGS)  # engines' default; see stop_strings()


def describe_tool(spec: ToolSpec) -> str:
    """One line of a system prompt's tool list, in this grammar's call syntax."""
    return f"<{spec.name}>{spec.usage}</{spec.name}>: {spec.summary}"


class ProtocolErrorKind(StrEnum):
    UNCLOSED_TAG = "unclosed_tag"
    UNMATCHED_CLOSE = "unmatched_close"
    UNKNOWN_TAG = "unknown_tag"
    NESTED_TAG = "nested_tag"
    MULTIPLE_TOOLS = "multiple_tools"
    EMPTY_QUERY = "empty_query"
    EMPTY_ANSWER = "empty_answer"
    TEXT_AFTER_ANSWER = "text_after_answer"
    OBSERVATION_IN_ACTION = "observation_in_action"
    NO_ACTION = "no_action"
    TOO_LONG = "too_long"
    INVALID_TEXT = "invalid_text"


# Parse results are named tuples, not frozen dataclasses: the env builds several per step and
# a frozen dataclass costs ~5x more to construct, which showed in the step-overhead benchmark.
class ProtocolError(NamedTuple):
    kind: ProtocolErrorKind
    message: str


class RoleSpan(NamedTuple):
    tag: str
    text: str


class ToolCall(NamedTuple):
    tool: str
    query: str


class ParsedTurn(NamedTuple):
    roles: tuple[RoleSpan, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    error: ProtocolError | None = None
    spans: tuple[str, ...] = ()  # tag names in order of appearance

    @property
    def ok(self) -> bool:
        return self.error is None


_TAG_RE = re.compile(r"<(/?)([A-Za-z_][A-Za-z0-9_]*)>")
_SURROGATE_RE = re.compile(r"[\ud800-\udfff]")
_FENCE_RE = re.compile(r"^\s*```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)\n?[ \t]*```\s*$", re.S)
_ROLE_SET = frozenset(ROLE_TAGS)


class _Grammar(NamedTuple):
    """The tag sets and the fast-path regex for one set of registered tools."""

    tools: tuple[str, ...]
    tool_set: frozenset[str]
    all_tags: frozenset[str]  # every tag the grammar knows (observation included)
    allowed_listing: str
    span_re: re.Pattern[str]

    @classmethod
    def build(cls, tools: tuple[str, ...]) -> _Grammar:
        all_tags = RESERVED_TAGS | frozenset(tools)
        # Fast path: a turn that is a run of well-formed spans whose bodies hold no "<" at
        # all (most turns) is matched span by span in C. Anything else, including every
        # malformed turn, goes through the general tag walker, the reference behaviour.
        span_re = re.compile(r"[^<]*<(" + "|".join((*ROLE_TAGS, *tools, ANSWER_TAG)) + r")>([^<]*)</\1>")
        return cls(tools, frozenset(tools), all_tags, ", ".join(sorted(all_tags - {OBSERVATION_TAG})), span_re)


_grammar_cache = _Grammar.build(tool_tags())


_extra_grammars: dict[tuple[tuple[str, ...], tuple[str, ...]], _Grammar] = {}


def _grammar(extra: tuple[str, ...] = ()) -> _Grammar:
    """The grammar for the tools registered now (rebuilt only after a registration), plus
    ``extra`` tags of one env's own (its MCP servers' tools)."""
    global _grammar_cache
    tools = tool_tags()
    if _grammar_cache.tools is not tools:
        _grammar_cache = _Grammar.build(tools)
    if not extra:
        return _grammar_cache
    key = (tools, extra)
    grammar = _extra_grammars.get(key)
    if grammar is None:
        if len(_extra_grammars) > 64:  # a bounded cache: envs with many different MCP tool sets
            _extra_grammars.clear()
        grammar = _extra_grammars[key] = _Grammar.build((*tools, *(t for t in extra if t not in tools)))
    return grammar


def _fail(kind: ProtocolErrorKind, message: str, spans: list[str]) -> ParsedTurn:
    return ParsedTurn(error=ProtocolError(kind, message), spans=tuple(spans))


def strip_code_fence(code: str) -> str:
    """Accept code with or without a ```python fence (the seed's prompt asks for ```py)."""
    match = _FENCE_RE.match(code)
    return match.group(1) if match else code.strip("\n")


def parse_turn(text: str, *, allow_parallel: bool = False, extra_tools: tuple[str, ...] = ()) -> ParsedTurn:
    """Parse one model turn. Never raises; see the module docstring for the grammar.
    ``extra_tools`` are tool tags an env adds to the registered ones (MCP tools)."""
    grammar = _grammar(extra_tools)
    if isinstance(text, str) and len(text) <= MAX_TURN_CHARS and text.isascii():
        fast = _parse_plain_spans(text, allow_parallel, grammar)
        if fast is not None:
            return fast
    return _parse_general(text, allow_parallel, grammar)


def _parse_plain_spans(text: str, allow_parallel: bool, grammar: _Grammar) -> ParsedTurn | None:
    """The fast path; None when the turn has markup it cannot judge (then the walker decides)."""
    match_at = grammar.span_re.match
    position, end = 0, len(text)
    found: list[tuple[str, str]] = []
    while True:
        match = match_at(text, position)
        if match is None:
            break
        found.append((match.group(1), match.group(2)))
        position = match.end()
    if "<" in text[position:] or not found:
        return None
    roles: list[RoleSpan] = []
    tools: list[ToolCall] = []
    spans: list[str] = []
    answer: str | None = None
    for tag, body in found:
        if answer is not None:
            return _fail(ProtocolErrorKind.TEXT_AFTER_ANSWER, "nothing may follow </answer>", spans)
        taken = _take_span(tag, body, roles, tools, spans)
        if isinstance(taken, ParsedTurn):
            return taken
        answer = taken if taken is not None else answer
    if answer is not None and position < end and not text[position:].isspace():
        return _fail(ProtocolErrorKind.TEXT_AFTER_ANSWER, "nothing may follow </answer>", spans)
    return _finish(roles, tools, answer, spans, allow_parallel)


def _take_span(
    tag: str, body: str, roles: list[RoleSpan], tools: list[ToolCall], spans: list[str]
) -> ParsedTurn | str | None:
    """Record one closed span (both parsers share this): the failed turn for an empty query or
    answer, the answer text for ``<answer>``, else None."""
    spans.append(tag)
    if tag in _ROLE_SET:
        roles.append(RoleSpan(tag, body.strip()))
        return None
    if tag != ANSWER_TAG:  # a tool: the walkers pass only role, tool and answer tags
        query = strip_code_fence(body) if tag == "code" else body.strip()
        if not query.strip():
            return _fail(ProtocolErrorKind.EMPTY_QUERY, f"<{tag}> is empty; put the query inside", spans)
        tools.append(ToolCall(tag, query))
        return None
    answer = body.strip()
    return answer or _fail(ProtocolErrorKind.EMPTY_ANSWER, "<answer> is empty", spans)


def _finish(
    roles: list[RoleSpan], tools: list[ToolCall], answer: str | None, spans: list[str], allow_parallel: bool
) -> ParsedTurn:
    if len(tools) > 1 and not allow_parallel:
        return _fail(
            ProtocolErrorKind.MULTIPLE_TOOLS,
            f"{len(tools)} tool calls in one turn; make exactly one call and wait for its observation",
            spans,
        )
    if not tools and answer is None:
        return _fail(
            ProtocolErrorKind.NO_ACTION,
            "the turn has no tool call and no <answer>; call a tool or give the final answer",
            spans,
        )
    return ParsedTurn(tuple(roles), tuple(tools), answer, None, tuple(spans))


def _parse_general(text: str, allow_parallel: bool, grammar: _Grammar) -> ParsedTurn:
    """The general walker: one C-level scan finds every tag; the Python loop walks only the tags."""
    spans: list[str] = []
    if not isinstance(text, str):
        return _fail(ProtocolErrorKind.INVALID_TEXT, "the action must be a string", spans)
    if len(text) > MAX_TURN_CHARS:
        return _fail(
            ProtocolErrorKind.TOO_LONG,
            f"the turn has {len(text)} characters; the limit is {MAX_TURN_CHARS}",
            spans,
        )
    if not text.isascii() and _SURROGATE_RE.search(text):
        return _fail(ProtocolErrorKind.INVALID_TEXT, "the turn contains invalid (surrogate) characters", spans)

    roles: list[RoleSpan] = []
    tools: list[ToolCall] = []
    answer: str | None = None
    answer_end = -1
    tags = list(_TAG_RE.finditer(text))
    index, count = 0, len(tags)
    while index < count:
        match = tags[index]
        closing, tag = match.group(1), match.group(2)
        if tag not in grammar.all_tags:
            # Stray markup between spans (e.g. "<br>") is an unknown tag only at top level.
            return _fail(
                ProtocolErrorKind.UNKNOWN_TAG,
                f"unknown tag <{closing}{tag}>; allowed tags: {grammar.allowed_listing}",
                spans,
            )
        if closing:
            return _fail(ProtocolErrorKind.UNMATCHED_CLOSE, f"</{tag}> closes a tag that was never opened", spans)
        if tag == OBSERVATION_TAG:
            return _fail(
                ProtocolErrorKind.OBSERVATION_IN_ACTION,
                "<observation> is written by the environment, never by the model; stop after your tool call",
                spans,
            )
        if answer is not None:
            return _fail(ProtocolErrorKind.TEXT_AFTER_ANSWER, "nothing may follow </answer>", spans)
        # Find the matching close among the following tags; in <code> everything else is opaque.
        closer = index + 1
        while closer < count:
            inner = tags[closer]
            inner_tag = inner.group(2)
            if inner_tag == tag and inner.group(1):
                break
            if tag != "code" and not inner.group(1) and inner_tag in grammar.all_tags:
                return _fail(
                    ProtocolErrorKind.NESTED_TAG,
                    f"<{inner_tag}> is nested inside <{tag}>; tags must follow each other, not nest",
                    spans,
                )
            closer += 1
        if closer == count:
            return _fail(ProtocolErrorKind.UNCLOSED_TAG, f"<{tag}> is never closed with </{tag}>", spans)
        body = text[match.end() : tags[closer].start()]
        index = closer + 1
        taken = _take_span(tag, body, roles, tools, spans)
        if isinstance(taken, ParsedTurn):
            return taken
        if taken is not None:
            answer, answer_end = taken, tags[closer].end()

    if answer is not None and not text[answer_end:].isspace() and text[answer_end:]:
        return _fail(ProtocolErrorKind.TEXT_AFTER_ANSWER, "nothing may follow </answer>", spans)
    return _finish(roles, tools, answer, spans, allow_parallel)


_OBSERVATION_MARKS = re.compile(rf"<(/?){OBSERVATION_TAG}>")


def render_observation(text: str) -> str:
    """The seed's observation convention, appended after the model's turn.

    A tool's text that holds the observation tags itself (a page, a program's output, a file)
    has them written ``&lt;observation&gt;`` / ``&lt;/observation&gt;``: a transcript is cut
    into observations and model text at these tags (``trainers.data.split_observations``,
    ``rewards.format.segments_from_text``), so a forged ``</observation>`` would make the rest
    of the tool's output read as text the model wrote (trained on in SFT, credited by a format
    check). Nothing else in the text changes.
    """
    safe = _OBSERVATION_MARKS.sub(lambda m: f"&lt;{m.group(1)}{OBSERVATION_TAG}&gt;", text)
    return f"\n<{OBSERVATION_TAG}>\n{safe}\n</{OBSERVATION_TAG}>\n\n"


def render_turn(
    roles: tuple[RoleSpan, ...] | list[RoleSpan] = (),
    tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (),
    answer: str | None = None,
) -> str:
    """Inverse of :func:`parse_turn` for well-formed turns (used by oracles and tests)."""
    parts = [f"<{r.tag}>\n{r.text}\n</{r.tag}>" for r in roles]
    parts += [f"<{c.tool}>{c.query}</{c.tool}>" for c in tool_calls]
    if answer is not None:
        parts.append(f"<{ANSWER_TAG}>{answer}</{ANSWER_TAG}>")
    return "\n".join(parts)
