"""Split turn text into CoA spans for display, losing no character, judging nothing.

:func:`coa_envs.protocol.parse_turn` validates a turn and keeps only span bodies; a viewer
needs the opposite: every character of the text, in order, assigned to the span it sits in,
even when the turn is malformed (that is when people look). So this is a lenient highlighter
over the protocol's own tag vocabulary: a known opening tag starts a span that runs to its
closing tag (or, unclosed, to the end of the text); text between spans, unknown markup and
stray closing tags are kept as plain text. ``parse_turn`` still says whether a turn is valid;
the page shows its verdict beside the spans.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TypedDict

from coa_envs.vocabulary import ANSWER_TAG, OBSERVATION_TAG, ROLE_TAGS, coa_tags, tool_names

__all__ = ["Span", "join_spans", "span_kind", "split_spans"]



@cache
def _tag_re(tags: tuple[str, ...]) -> re.Pattern[str]:
    """Any opening or closing tag of the vocabulary (rebuilt when a tool is registered)."""
    return re.compile(r"<(/?)(" + "|".join(sorted(tags, key=len, reverse=True)) + r")>")


class Span(TypedDict):
    """``kind``: role | tool | answer | observation | text; ``tag`` empty for text."""

    kind: str
    tag: str
    text: str
    closed: bool


def span_kind(tag: str) -> str:
    if tag in ROLE_TAGS:
        return "role"
    if tag in tool_names():
        return "tool"
    return {ANSWER_TAG: "answer", OBSERVATION_TAG: "observation"}.get(tag, "text")


def split_spans(text: str) -> list[Span]:
    """The spans of ``text`` in order; :func:`join_spans` gives ``text`` back exactly."""
    spans: list[Span] = []
    plain_start = position = 0
    tag_re = _tag_re(coa_tags())

    def flush(end: int) -> None:
        if end > plain_start:
            spans.append(Span(kind="text", tag="", text=text[plain_start:end], closed=True))

    while True:
        match = tag_re.search(text, position)
        if match is None:
            break
        if match.group(1):  # a closing tag with no opener: part of the surrounding text
            position = match.end()
            continue
        tag = match.group(2)
        close = text.find(f"</{tag}>", match.end())
        flush(match.start())
        if close < 0:
            spans.append(Span(kind=span_kind(tag), tag=tag, text=text[match.end():], closed=False))
            return spans
        spans.append(Span(kind=span_kind(tag), tag=tag, text=text[match.end():close], closed=True))
        plain_start = position = close + len(tag) + 3
    flush(len(text))
    return spans


def join_spans(spans: list[Span]) -> str:
    """Inverse of :func:`split_spans` (what the tests check, and what "copy text" gives)."""
    parts = []
    for span in spans:
        if span["kind"] == "text":
            parts.append(span["text"])
        else:
            parts.append(f"<{span['tag']}>{span['text']}" + (f"</{span['tag']}>" if span["closed"] else ""))
    return "".join(parts)
