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


def test_logprob_bytes_are_each_tokens_own_and_join_to_the_text(tiny_tokenizer):
    """The tiny tokenizer splits 'é' into two byte pieces: each alone decodes to U+FFFD, but
    the entries' bytes (OpenAI's way to rebuild text across such pieces) must be the raw ones."""
    from agents.openai_wire import chat_logprobs

    text = "naïve — 日本 <|im_end|>"
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    entries = chat_logprobs(tiny_tokenizer, ids, [-0.5] * len(ids))
    assert any(entry["token"] == "\ufffd" for entry in entries)  # the case this is about
    assert b"".join(bytes(entry["bytes"]) for entry in entries).decode() == text
    assert entries[-1]["bytes"] == list(b"<|im_end|>") and entries[-1]["top_logprobs"] == []


def test_byte_fallback_pieces_give_their_byte():
    from agents.openai_wire import token_bytes

    class Piece:  # a SentencePiece-style tokenizer with byte fallback (Llama 2, Mistral, Gemma)
        all_special_ids = (0,)
        added_tokens_encoder: dict = {}
        backend_tokenizer = type("Backend", (), {"decoder": "Sequence([Replace('▁', ' '), ByteFallback()])"})()
        pieces = {0: "</s>", 1: "<0xE2>", 2: "▁the"}

        def convert_ids_to_tokens(self, token_id):
            return self.pieces[token_id]

        def decode(self, ids, skip_special_tokens=False):
            return "".join(self.pieces[i] for i in ids)

    assert [token_bytes(Piece(), i) for i in (0, 1, 2)] == [b"</s>", b"\xe2", b" the"]


def test_sse_lines_split_where_sse_does_not_at_unicode_line_separators():
    """vLLM leaves U+2028/U+0085 raw inside an event's JSON; httpx's ``aiter_lines`` would cut
    the event there, so the gateway reads an upstream's events with ``sse_lines``."""
    import asyncio
    import json

    from agents.openai_wire import sse_lines

    event = 'data: {"text": "a\u2028b\u0085c"}'.encode()

    class Response:
        async def aiter_bytes(self):
            whole = event + b"\r\n\r\ndata: [DONE]\n\n"
            for at in range(0, len(whole), 5):  # chunks that split characters and line ends
                yield whole[at:at + 5]

    async def read() -> list[str]:
        return [line async for line in sse_lines(Response())]

    lines = [line for line in asyncio.run(read()) if line]
    assert lines == [event.decode(), "data: [DONE]"]
    assert json.loads(lines[0][6:]) == {"text": "a\u2028b\u0085c"}
