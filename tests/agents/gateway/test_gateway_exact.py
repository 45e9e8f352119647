"""Token-exactness of recorded sessions with SmolLM2's real tokenizer (byte-level BPE, ChatML).

For every call a client makes through the gateway, the session's trajectory holds the ids
the engine was fed as that call's context and the ids it sampled (with their logprobs) as a
trainable span, streamed or not, with or without tool calls; a chat template that drops
earlier reasoning yields token-exact segments instead of re-tokenised text.
"""

from __future__ import annotations

import json

import pytest

from tests.agents.conftest import make_scripted_lm
from tests.agents.gateway.conftest import SpyEngine, assert_token_exact, served_gateway

WIKI = {"type": "function", "function": {
    "name": "wiki_search", "description": "search the wiki",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
CALL = '<tool_call>\n{"name": "wiki_search", "arguments": {"query": "capital of France"}}\n</tool_call><|im_end|>'
ANSWER = "The capital is Paris.<|im_end|>"

# Qwen3-style: earlier assistant turns lose their <think> reasoning when the history is rendered.
DROPS_REASONING = (
    "{%- for message in messages %}{%- set content = message['content'] %}"
    "{%- if message['role'] == 'assistant' and not loop.last and '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip() %}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


@pytest.fixture(scope="module")
def smol_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def random_smol(smol_tokenizer):
    """SmolLM2's vocabulary on a small random model: fast, and its samples are arbitrary byte
    pieces (half characters, merged punctuation) that re-tokenising would move."""
    from agents.tiny import build_tiny_model

    return build_tiny_model(smol_tokenizer, hidden_size=32, layers=1, heads=2, kv_heads=1)


def _engine(model, tokenizer):
    from agents.engines.hf import HFEngine

    return SpyEngine(HFEngine(model, tokenizer))


def _ask(client, messages, stream, **options):
    """One call; returns (assistant message as the client would echo it, finish, logprobs)."""
    if not stream:
        choice = client.chat.completions.create(model="m", messages=messages, logprobs=True, **options).choices[0]
        message = choice.message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})
        return message, choice.finish_reason, [e.logprob for e in choice.logprobs.content]
    content, calls, logprobs, finish = [], [], [], None
    for chunk in client.chat.completions.create(model="m", messages=messages, logprobs=True, stream=True,
                                                **options):
        choice = chunk.choices[0]
        content.append(choice.delta.content or "")
        calls += [c.model_dump(exclude_none=True) for c in choice.delta.tool_calls or ()]
        logprobs += [e.logprob for e in (choice.logprobs.content if choice.logprobs else None) or ()]
        finish = choice.finish_reason or finish
    message = {"role": "assistant", "content": "".join(content)}
    if calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    return message, finish, logprobs


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_multi_turn_session_is_one_token_exact_trajectory(smol_tokenizer, random_smol, stream):
    import openai

    engine = _engine(random_smol, smol_tokenizer)
    with served_gateway(engine, smol_tokenizer) as (url, gateway):
        client = openai.OpenAI(base_url=f"{url}/sessions/run-1/v1", api_key="x", max_retries=0)
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Héllo — what's 2+2?"}]
        for turn, options in enumerate([{"max_tokens": 12, "temperature": 1.0, "seed": 1},
                                        {"max_tokens": 12, "stop": ["e", "\n"], "seed": 2},
                                        {"max_tokens": 9, "seed": 3}]):
            message, finish, logprobs = _ask(client, messages, stream, **options)
            assert finish in ("stop", "length")
            assert logprobs == pytest.approx(list(engine.records[-1][1].logprobs))  # what the client was told
            messages += [message, {"role": "user", "content": f"And then? ({turn})"}]
        trajectories = gateway.finish(gateway.session("run-1"))
    assert len(engine.records) == 3
    assert_token_exact(trajectories, engine.records, smol_tokenizer)
    assert len(trajectories) == 1  # ChatML is append-only: the model's replies kept as sampled
    assert trajectories[0].info["gateway"]["layout"] == "append_only"
    assert trajectories[0].info["gateway"]["reused_prompt_tokens"] > 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_tool_calls_round_trip_token_exact(smol_tokenizer, stream):
    import openai

    from agents.gateway.prompts import resolve_chat_template

    engine = _engine(make_scripted_lm(smol_tokenizer, [CALL, ANSWER]), smol_tokenizer)
    # SmolLM2's own template renders no tools; ChatML with function calling does.
    with served_gateway(engine, smol_tokenizer, chat_template=resolve_chat_template("chatml-tools")) as (url, gw):
        client = openai.OpenAI(base_url=f"{url}/sessions/tools-1/v1", api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        message, finish, _ = _ask(client, messages, stream, tools=[WIKI])
        assert finish == "tool_calls"
        (call,) = message["tool_calls"]
        assert call["function"]["name"] == "wiki_search"
        assert json.loads(call["function"]["arguments"]) == {"query": "capital of France"}
        assert call["id"].startswith("call_")
        messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "Paris is the capital."}]
        message, finish, _ = _ask(client, messages, stream, tools=[WIKI])
        assert (message["content"], finish) == ("The capital is Paris.", "stop")
        trajectories = gw.finish(gw.session("tools-1"))
    assert_token_exact(trajectories, engine.records, smol_tokenizer)
    # The echoed call is rendered from what the model wrote, so the session stays one sequence.
    assert len(trajectories) == 1
    generated = [s.text for s in trajectories[0].segments if s.kind == "generated"]
    assert generated == [CALL, ANSWER]


def test_a_template_that_drops_earlier_reasoning_yields_segments_not_retokenised_text(smol_tokenizer):
    import openai

    turns = ["<think>Plan: add them.</think>It is 4.<|im_end|>", "<think>Double it.</think>Then 8.<|im_end|>",
             "<think>Done.</think>Bye.<|im_end|>"]
    engine = _engine(make_scripted_lm(smol_tokenizer, turns), smol_tokenizer)
    with served_gateway(engine, smol_tokenizer, chat_template=DROPS_REASONING) as (url, gateway):
        client = openai.OpenAI(base_url=f"{url}/sessions/think-1/v1", api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "2+2?"}]
        for question in ("Double it?", "Thanks."):
            reply = client.chat.completions.create(model="m", messages=messages).choices[0].message
            messages += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": question}]
        client.chat.completions.create(model="m", messages=messages)
        trajectories = gateway.finish(gateway.session("think-1"))
    assert_token_exact(trajectories, engine.records, smol_tokenizer)
    assert len(trajectories) == 3
    infos = [t.info["gateway"] for t in trajectories]
    assert {i["layout"] for i in infos} == {"split"}
    assert [i["split_reason"] for i in infos] == [None, "history_rewritten", "history_rewritten"]
    assert all(i["common_prefix"] > 0 for i in infos[1:])
    # Each later segment's prompt is the template's own rendering (reasoning dropped) ...
    second_prompt = smol_tokenizer.decode(trajectories[1].prompt_ids)
    assert "It is 4." in second_prompt and "Plan: add them." not in second_prompt
    # ... while every reply keeps its reasoning as sampled, trained once.
    assert [s.text for t in trajectories for s in t.segments if s.kind == "generated"] == turns
