"""The ``openai`` engine passes ``SamplingParams.top_logprobs`` to the server and returns each
step's alternatives as token ids (``Completion.top_logprobs``), as the ``hf`` engine gives them;
it asked for none (``logprobs=0``) and returned none. Tested against ``coa serve``."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("openai", reason="needs the [llm] extra")


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_top_logprobs_through_coa_serve_equal_the_hf_engines(served_tiny, tiny_dir, mode):
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.hf import HFEngine
    from agents.engines.openai_compat import OpenAIEngine

    local = HFEngine(str(tiny_dir))
    remote = OpenAIEngine(str(served_tiny.base_url), "tiny", tokenizer=local.tokenizer, mode=mode)
    assert remote.supports_top_logprobs
    messages = ({"role": "user", "content": "tell me"},)
    text = local.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    prompt = local.tokenizer.encode(text, add_special_tokens=False)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=5, top_logprobs=3, stop=())
    request = GenerationRequest(token_ids=tuple(prompt)) if mode == "completions" else \
        GenerationRequest(messages=messages)
    (got,) = remote.generate([request], params)
    (want,) = local.generate([GenerationRequest(token_ids=tuple(prompt))], params)
    assert got.ok and want.ok, (got, want)
    assert got.token_ids == want.token_ids and len(got.top_logprobs) == len(got.token_ids)
    for step, reference in zip(got.top_logprobs, want.top_logprobs, strict=True):
        assert [t for t, _ in step] == [t for t, _ in reference]
        assert all(math.isclose(a, b, abs_tol=1e-4) for (_, a), (_, b) in zip(step, reference, strict=True))
    remote.close()


def test_without_server_extensions_no_alternatives_are_claimed(served_tiny, tiny_dir):
    from agents.engines.openai_compat import OpenAIEngine

    assert not OpenAIEngine(str(served_tiny.base_url), "tiny", mode="chat", server_extensions=False) \
        .supports_top_logprobs
