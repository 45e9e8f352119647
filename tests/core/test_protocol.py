"""The CoA grammar: well-formed turns parse exactly, malformed ones give typed errors, never exceptions."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coa_envs.protocol import (
    MAX_TURN_CHARS,
    ROLE_TAGS,
    STOP_STRINGS,
    TOOL_TAGS,
    ProtocolErrorKind,
    RoleSpan,
    ToolCall,
    parse_turn,
    render_observation,
    render_turn,
)


def test_role_spans_tool_call_and_order_are_parsed():
    turn = "<plan>\n1. search\n</plan>\n<think>look it up</think>\n<wiki_search> capital of France </wiki_search>"
    parsed = parse_turn(turn)
    assert parsed.ok
    assert parsed.roles == (RoleSpan("plan", "1. search"), RoleSpan("think", "look it up"))
    assert parsed.tool_calls == (ToolCall("wiki_search", "capital of France"),)
    assert parsed.answer is None
    assert parsed.spans == ("plan", "think", "wiki_search")


@pytest.mark.parametrize(
    "body",
    ["```python\nprint(1 + 1)\n```", "```py\nprint(1 + 1)\n```", "\nprint(1 + 1)\n", "```\nprint(1 + 1)\n```"],
)
def test_code_with_or_without_fence(body):
    parsed = parse_turn(f"<code>{body}</code>")
    assert parsed.ok and parsed.tool_calls[0].query == "print(1 + 1)"


def test_code_body_is_opaque_so_programs_may_print_tags():
    parsed = parse_turn("<code>print('<think>not a tag</think>', 1 < 2 > 0)</code>")
    assert parsed.ok and "<think>" in parsed.tool_calls[0].query


def test_answer_terminates_and_boxed_is_kept_verbatim():
    parsed = parse_turn("<think>done</think>\n<answer>\\boxed{42}</answer>\n")
    assert parsed.ok and parsed.answer == "\\boxed{42}"


@pytest.mark.parametrize(
    ("turn", "kind"),
    [
        ("<think>never closed", ProtocolErrorKind.UNCLOSED_TAG),
        ("<search>q</search>", ProtocolErrorKind.UNKNOWN_TAG),
        ("<web_search>a</web_search><wiki_search>b</wiki_search>", ProtocolErrorKind.MULTIPLE_TOOLS),
        ("<web_search>   </web_search>", ProtocolErrorKind.EMPTY_QUERY),
        ("<answer>1</answer> and more text", ProtocolErrorKind.TEXT_AFTER_ANSWER),
        ("<answer>1</answer><think>x</think>", ProtocolErrorKind.TEXT_AFTER_ANSWER),
        ("<think>a <web_search>q</web_search></think>", ProtocolErrorKind.NESTED_TAG),
        ("<web_search><crawl_page>u</crawl_page></web_search>", ProtocolErrorKind.NESTED_TAG),
        ("x" * (100 * 1024), ProtocolErrorKind.TOO_LONG),
        ("<think>\ud800</think><answer>1</answer>", ProtocolErrorKind.INVALID_TEXT),
        ("<think>only thinking</think>", ProtocolErrorKind.NO_ACTION),
        ("", ProtocolErrorKind.NO_ACTION),
        ("</think>", ProtocolErrorKind.UNMATCHED_CLOSE),
        ("<code>x=1</code>\n<observation>fake</observation>", ProtocolErrorKind.OBSERVATION_IN_ACTION),
        ("<answer>  </answer>", ProtocolErrorKind.EMPTY_ANSWER),
    ],
)
def test_malformed_turns_give_typed_errors(turn, kind):
    parsed = parse_turn(turn)
    assert parsed.error is not None and parsed.error.kind is kind
    assert parsed.error.message


def test_parallel_tool_calls_are_an_option():
    parsed = parse_turn("<web_search>a</web_search>\n<web_search>b</web_search>", allow_parallel=True)
    assert parsed.ok and [c.query for c in parsed.tool_calls] == ["a", "b"]


def test_stop_strings_close_every_tool_and_the_answer():
    assert set(STOP_STRINGS) == {f"</{t}>" for t in TOOL_TAGS} | {"</answer>"}


def test_observation_rendering_matches_the_seed_convention():
    assert render_observation("result") == "\n<observation>\nresult\n</observation>\n\n"


def test_garbage_of_100kb_is_an_error_not_a_crash():
    garbage = "".join(chr(c % 0x2FFF + 32) for c in range(MAX_TURN_CHARS + 10))
    assert parse_turn(garbage).error is not None


_safe_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="<>"), min_size=1, max_size=80
).filter(lambda s: s.strip() == s and s)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    roles=st.lists(st.tuples(st.sampled_from(ROLE_TAGS), _safe_text), max_size=4),
    tool=st.one_of(st.none(), st.tuples(st.sampled_from([t for t in TOOL_TAGS if t != "code"]), _safe_text)),
    answer=st.one_of(st.none(), _safe_text),
)
def test_render_then_parse_round_trips(roles, tool, answer):
    if tool is None and answer is None:
        answer = "x"
    role_spans = [RoleSpan(t, s) for t, s in roles]
    calls = [ToolCall(*tool)] if tool else []
    parsed = parse_turn(render_turn(role_spans, calls, answer))
    assert parsed.ok, parsed.error
    assert list(parsed.roles) == role_spans
    assert list(parsed.tool_calls) == calls
    assert parsed.answer == answer


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=2000))
def test_parser_never_raises_on_arbitrary_text(text):
    parsed = parse_turn(text)
    assert parsed.ok or parsed.error is not None


_tag_soup = st.lists(
    st.one_of(
        st.sampled_from([f"<{t}>" for t in (*ROLE_TAGS, *TOOL_TAGS, "answer", "observation", "foo")]),
        st.sampled_from([f"</{t}>" for t in (*ROLE_TAGS, *TOOL_TAGS, "answer", "observation")]),
        st.text(max_size=20),
    ),
    max_size=30,
).map("".join)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(_tag_soup)
def test_parser_never_raises_on_tag_soup(text):
    parsed = parse_turn(text)
    assert parsed.ok or parsed.error is not None
    if parsed.ok:
        assert parsed.answer is not None or parsed.tool_calls


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(_tag_soup, st.booleans())
def test_fast_path_agrees_with_the_general_walker(text, allow_parallel):
    """The span-matching fast path is an optimisation only: same result as the reference walker."""
    from coa_envs.protocol import _grammar, _parse_general

    assert parse_turn(text, allow_parallel=allow_parallel) == _parse_general(text, allow_parallel, _grammar())
