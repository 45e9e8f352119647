"""A long gateway session costs each call its own prompt, not the whole session again: the
prompt's reuse of an earlier context built every earlier call's context (its text and its ids)
on every call, so call k of an append-only session copied k contexts, a quadratic session.
Counted in ids built, never timed."""

from __future__ import annotations

import itertools

from agents.gateway.prompts import build_prompt
from agents.gateway.sessions import GatewayCall, GatewaySession


class CharTokenizer:
    """One id per character; renders a conversation as ``role: content`` lines."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, continue_final_message=False):
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return text + ("assistant: " if add_generation_prompt else "")

    def encode(self, text, add_special_tokens=False):
        return [ord(ch) for ch in text]


def _play(session: GatewaySession, turns: int) -> list[int]:
    """An append-only session of ``turns`` calls; each call's prompt length."""
    tokenizer, messages, lengths = CharTokenizer(), [{"role": "user", "content": "start"}], []
    for turn in range(turns):
        plan = build_prompt(tokenizer, session, messages, None)
        lengths.append(len(plan.ids))
        reply = f"reply {turn}"
        session.next_index()
        session.record(GatewayCall(index=turn, source="engine", messages=list(messages), tools=None,
                                   prompt_text=plan.text, prompt_ids=plan.ids, completion_text=reply + "\n",
                                   completion_ids=tokenizer.encode(reply + "\n"), logprobs=[0.0] * (len(reply) + 1),
                                   reply={"role": "assistant", "content": reply}, finish_reason="stop"),
                       reply + "\n")
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"tool result {turn}"}]
    return lengths


def test_each_call_builds_at_most_its_own_prompts_ids(monkeypatch):
    built = []
    context_ids = GatewayCall.context_ids

    def counted(call):
        ids = context_ids.fget(call)
        built.append(len(ids))
        return ids

    monkeypatch.setattr(GatewayCall, "context_ids", property(counted))
    session = GatewaySession("long")
    lengths = _play(session, 80)
    assert sum(built) <= sum(lengths)  # linear: each call builds only the context it reuses
    calls = session.snapshot()
    for previous, call in itertools.pairwise(calls):
        assert call.prompt_ids[:len(previous.context_ids)] == previous.context_ids  # still reused whole


def test_the_longest_fitting_context_wins_and_the_newest_among_equals():
    session = GatewaySession("pick")

    def record(index: int, prompt: str, completion: str) -> None:
        session.next_index()
        session.record(GatewayCall(index=index, source="engine", messages=[], tools=None, prompt_text=prompt,
                                   prompt_ids=[ord(c) for c in prompt], completion_text=completion,
                                   completion_ids=[ord(c) + 1000 * index for c in completion], logprobs=[],
                                   reply={"role": "assistant", "content": completion}, finish_reason="stop"))

    record(0, "ab", "c")
    record(1, "abcd", "e")
    record(2, "ab", "c")  # as long as call 0's, and newer
    record(3, "xy", "zzzzzzzz")
    text, ids = session.longest_context("abcdefg")
    assert text == "abcde" and ids[-1] == ord("e") + 1000
    text, ids = session.longest_context("abcX")
    assert text == "abc" and ids[-1] == ord("c") + 2000
    assert session.longest_context("q") == ("", [])
