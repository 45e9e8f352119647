"""The hf engine's continuous batching and KV reuse, on the tiny Llama (real attention).

What a user relies on: reusing a previous turn's keys/values changes nothing a sampler
reports (same ids, logprobs within float rounding of a full forward pass), rows joining
and leaving a running batch decode exactly as they would alone, and the stored memory is
bounded, released with the episode and dropped when the weights change.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the [llm] extra")

from agents.engines import GenerationRequest, SamplingParams  # noqa: E402
from agents.engines.hf import HFEngine  # noqa: E402
from tests.batching_scenario import short_request_mid_decode  # noqa: E402

OBSERVATIONS = ["\n<observation>\nBafurk was founded by Ilse Marr.\n</observation>\n\n",
                "\n<observation>\nMarr was born in Oslo.\n</observation>\n\n"]
TEMPERATURE = 0.8


def _prompt(tokenizer, question: str = "Who founded Bafurk Foundry?") -> list[int]:
    messages = [{"role": "system", "content": "Answer with tagged blocks. Search one fact at "
                 "a time, then answer inside <answer></answer>."},
                {"role": "user", "content": question}]
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                              tokenize=True, return_dict=False))


def _params(seed: int, max_new_tokens: int = 10) -> SamplingParams:
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=TEMPERATURE, seed=seed,
                          stop=())


def _episode(engine, tokenizer, prompt: list[int], seed: int):
    """Three turns; each prompt is the previous context + sampled ids + observation ids."""
    context, completions = list(prompt), []
    for turn in range(3):
        request = GenerationRequest(token_ids=tuple(context), params=_params(seed * 10 + turn))
        (completion,) = engine.generate([request], SamplingParams())
        assert completion.ok, completion.error
        completions.append(completion)
        context += completion.token_ids
        if turn < len(OBSERVATIONS):
            context += tokenizer.encode(OBSERVATIONS[turn], add_special_tokens=False)
    return completions, context


def test_reuse_prefills_only_the_new_suffix_and_changes_no_sample(tiny_model, tiny_tokenizer):
    prompt = _prompt(tiny_tokenizer)
    reuse = HFEngine(tiny_model, tiny_tokenizer)
    plain = HFEngine(tiny_model, tiny_tokenizer, kv_cache_bytes=0)
    assert reuse.continuous  # a Llama: continuous batching with KV reuse
    with_reuse, context = _episode(reuse, tiny_tokenizer, prompt, seed=1)
    without, context_plain = _episode(plain, tiny_tokenizer, prompt, seed=1)

    assert [c.token_ids for c in with_reuse] == [c.token_ids for c in without]
    assert context == context_plain
    for a, b in zip(with_reuse, without, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    observation_ids = [len(tiny_tokenizer.encode(o, add_special_tokens=False))
                       for o in OBSERVATIONS]
    # Turn k>1 feeds the previous turn's last sampled id and the observation, nothing else.
    assert reuse.stats["prefill_tokens"] == len(prompt) + sum(1 + n for n in observation_ids)
    assert with_reuse[1].usage["cached_tokens"] == len(prompt) + len(with_reuse[0].token_ids) - 1
    assert without[1].usage["cached_tokens"] == 0
    assert plain.stats["prefill_tokens"] > 2 * reuse.stats["prefill_tokens"]


def test_logprobs_after_reuse_match_a_full_forward_pass(tiny_model, tiny_tokenizer):
    """What the learner recomputes: one forward over the whole episode (float32)."""
    prompt = _prompt(tiny_tokenizer)
    completions, context = _episode(HFEngine(tiny_model, tiny_tokenizer), tiny_tokenizer,
                                    prompt, seed=2)
    with torch.no_grad():
        logits = tiny_model(torch.tensor([context])).logits[0].float()
    logp = torch.log_softmax(logits / TEMPERATURE, -1)
    position, worst = len(prompt), 0.0
    for turn, completion in enumerate(completions):
        for offset, (token, sampled) in enumerate(zip(completion.token_ids, completion.logprobs,
                                                      strict=True)):
            expected = logp[position + offset - 1, token].item()
            worst = max(worst, abs(expected - sampled))
        position += len(completion.token_ids)
        if turn < len(OBSERVATIONS):
            position += len(tiny_tokenizer.encode(OBSERVATIONS[turn], add_special_tokens=False))
    assert position == len(context)
    assert worst < 1e-5, f"sampler/learner logprob mismatch {worst:.2e}"


def test_rows_of_a_mixed_batch_decode_as_they_would_alone(tiny_model, tiny_tokenizer):
    """One batch mixing a row resumed from a stored prefix (a gap between its past and its
    new tokens), a long fresh row and a short one, with rows finishing at different steps."""
    engine = HFEngine(tiny_model, tiny_tokenizer)
    first = _prompt(tiny_tokenizer)
    (turn,) = engine.generate([GenerationRequest(token_ids=tuple(first), params=_params(5))],
                              SamplingParams())
    resumed = first + list(turn.token_ids) + tiny_tokenizer.encode(OBSERVATIONS[0])
    long_fresh = _prompt(tiny_tokenizer, "Which river runs through the capital of the "
                                         "country where the founder of Bafurk was born?")
    short_fresh = tiny_tokenizer.encode("<|im_start|>assistant\n")
    requests = [GenerationRequest(token_ids=tuple(ids), params=_params(seed, budget))
                for ids, seed, budget in ((resumed, 6, 12), (long_fresh, 7, 4),
                                          (short_fresh, 8, 9))]
    together = engine.generate(requests, SamplingParams())
    assert together[0].usage["cached_tokens"] == len(first) + len(turn.token_ids) - 1
    alone = HFEngine(tiny_model, tiny_tokenizer, kv_cache_bytes=0)
    for request, batched in zip(requests, together, strict=True):
        (single,) = alone.generate([request], SamplingParams())
        assert batched.token_ids == single.token_ids
        assert batched.logprobs == pytest.approx(single.logprobs, abs=1e-5)
    assert [len(c.token_ids) for c in together] == [12, 4, 9]


def test_a_shared_prompt_prefix_is_prefilled_once(tiny_model, tiny_tokenizer):
    questions = ["Who founded Bafurk?", "Where was Ilse Marr born?", "What is 2+2?",
                 "Which river runs through Oslo?"]
    prompts = [_prompt(tiny_tokenizer, q) for q in questions]
    engine = HFEngine(tiny_model, tiny_tokenizer)
    requests = [GenerationRequest(token_ids=tuple(p), params=_params(i, 6))
                for i, p in enumerate(prompts)]
    shared = engine.generate(requests, SamplingParams())
    common = min(next(i for i, (a, b) in enumerate(zip(p, prompts[0], strict=False)) if a != b)
                 for p in prompts[1:])
    assert engine.stats["shared_prefixes"] == 1
    assert engine.stats["prefill_tokens"] == common + sum(len(p) - common for p in prompts)
    separate = HFEngine(tiny_model, tiny_tokenizer, kv_cache_bytes=0).generate(
        requests, SamplingParams())
    assert [c.token_ids for c in shared] == [c.token_ids for c in separate]


def test_batching_engine_admits_a_request_while_another_decodes(tiny_model, tiny_tokenizer):
    """Continuous batching: a short request sent while a long one is mid-decode finishes
    first, instead of waiting for the long one's batch to end."""
    short = GenerationRequest(token_ids=tuple(_prompt(tiny_tokenizer, "Hi?")), params=_params(3, 4))
    run = short_request_mid_decode(lambda: HFEngine(tiny_model, tiny_tokenizer), short,
                                   _prompt(tiny_tokenizer), _params(4, 60))
    assert len(run["long"].token_ids) == 60 and run["finished"] == ["short", "long"]
    assert run["short"].token_ids == run["alone"].token_ids


def test_weight_update_drops_stored_keys_values(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer)
    prompt = _prompt(tiny_tokenizer)
    (turn,) = engine.generate([GenerationRequest(token_ids=tuple(prompt), params=_params(1))],
                              SamplingParams())
    assert len(engine.prefix_cache) == 1
    with torch.no_grad():  # what load_state_dict / an optimizer step does: in-place writes
        tiny_model.lm_head.weight.add_(0.0)
    follow_up = GenerationRequest(token_ids=tuple(prompt + list(turn.token_ids) + [5, 6]),
                                  params=_params(2))
    (second,) = engine.generate([follow_up], SamplingParams())
    assert second.usage["cached_tokens"] == 0
    assert engine.stats["cache_invalidations"] == 1


def test_release_frees_an_ended_episode_and_the_store_stays_bounded(tiny_model, tiny_tokenizer):
    engine = HFEngine(tiny_model, tiny_tokenizer)
    _, context = _episode(engine, tiny_tokenizer, _prompt(tiny_tokenizer), seed=3)
    assert len(engine.prefix_cache) == 1  # each turn took its predecessor's entry over
    assert engine.release(context) == 1 and len(engine.prefix_cache) == 0
    layers = tiny_model.config.num_hidden_layers
    per_token = 2 * layers * tiny_model.config.num_key_value_heads * 16 * 4  # head_dim 16
    budget = 40 * per_token
    small = HFEngine(tiny_model, tiny_tokenizer, kv_cache_bytes=budget)
    for seed in range(4):
        _episode(small, tiny_tokenizer, _prompt(tiny_tokenizer, f"Question {seed}?"), seed)
    assert small.prefix_cache.nbytes <= budget


def test_a_model_that_cannot_reuse_falls_back_to_full_prefill(tiny_tokenizer):
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    windowed = MistralForCausalLM(MistralConfig(
        vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, intermediate_size=64, sliding_window=8,
        eos_token_id=tiny_tokenizer.eos_token_id, pad_token_id=tiny_tokenizer.pad_token_id))
    engine = HFEngine(windowed, tiny_tokenizer)
    assert not engine.continuous
    prompt = _prompt(tiny_tokenizer)
    _episode(engine, tiny_tokenizer, prompt, seed=4)
    assert len(engine.prefix_cache) == 0 and engine.stats["prefill_tokens"] > 3 * len(prompt)
    requests = [GenerationRequest(token_ids=tuple(prompt[:n]), params=_params(n)) for n in (9, 30)]
    batched = engine.generate(requests, SamplingParams())
    assert [c.token_ids for c in batched] == [engine.generate([r], SamplingParams())[0].token_ids
                                              for r in requests]


def test_the_episode_loop_releases_the_episodes_cache(tiny_model, tiny_tokenizer):
    """run_episode (eval's loop) ends the policy's episode: nothing it owned stays stored."""
    import gymnasium as gym

    import coa_envs  # noqa: F401  (registers ids)
    from agents.episode import run_episode
    from agents.policy import LLMPolicy

    engine = HFEngine(tiny_model, tiny_tokenizer)
    policy = LLMPolicy(engine, sampling=SamplingParams(max_new_tokens=12), seed=5)
    env = gym.make("coa/MATH500-v1", max_turns=3)
    try:
        trajectory = run_episode(env, policy, options={"task_index": 0})
    finally:
        env.close()
    assert trajectory.num_turns >= 2 and engine.stats["cached_tokens"] > 0  # reuse happened
    assert [e for e in engine.prefix_cache._entries.values() if not e.shared] == []
