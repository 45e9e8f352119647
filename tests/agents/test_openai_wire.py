"""The wire pieces coa serve and coa gateway share: a stream never leaks a stop string, the
eos text or half a character, and what it sends adds up to the non-streamed text."""

from __future__ import annotations

import pytest

from agents.openai_wire import TextReleaser, flat_message, visible_text


class CharTokenizer:
    """Token i is character chr(i); token 0 is a lone UTF-8 lead byte (decodes to U+FFFD)."""

    def decode(self, ids, skip_special_tokens=False):
        raw = b"".join(b"\xc3" if i == 0 else chr(i).encode() for i in ids)
        return raw.decode(errors="replace")


def _stream(text: str, stops=(), eos="", hold_from=None):
    releaser = TextReleaser(CharTokenizer(), stops, eos, hold_from=hold_from)
    sent = [releaser.push(ord(ch)) for ch in text]
    return releaser, "".join(sent)


def test_a_stop_string_never_leaks_and_the_rest_completes_the_text():
    text = "search </web_search> and more"
    releaser, sent = _stream(text, stops=("</web_search>",))
    assert "</" not in sent
    final = visible_text(text, "</web_search>", include_stop=False)
    assert sent + releaser.rest(final) == "search "


def test_the_eos_text_is_held_back_until_the_end():
    releaser, sent = _stream("hello<|im_end|>", eos="<|im_end|>")
    assert "<|im_end" not in sent and "hello".startswith(sent)
    assert sent + releaser.rest("hello") == "hello"


def test_text_from_a_tool_call_opener_is_held_for_tool_calls():
    _, sent = _stream('I will look.<tool_call>{"name": "x"}', hold_from="<tool_call>")
    assert sent == "I will look."[: len(sent)] and "<tool" not in sent


def test_half_a_character_is_never_sent():
    releaser = TextReleaser(CharTokenizer(), ())
    assert releaser.push(ord("a")) == "a"
    assert releaser.push(0) == ""  # a lead byte alone decodes to U+FFFD: held


@pytest.mark.parametrize(("content", "expected"), [
    ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "ab"), (None, ""), ("x", "x")])
def test_content_parts_and_null_become_plain_text(content, expected):
    assert flat_message({"role": "user", "content": content})["content"] == expected
