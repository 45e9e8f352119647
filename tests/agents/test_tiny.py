"""The tiny tokenizer/model every LLM-side test builds on: offline, deterministic, CoA-aware."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="needs the [llm] extra")

from agents.tiny import (
    COA_TAGS,
    build_tiny_model,
    load_tiny,
    save_tiny,
    train_tiny_tokenizer,
)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tiny_tokenizer()


def test_merges_cross_tag_boundaries(tokenizer):
    """The hazard token-exact trajectories guard against must exist in this tokenizer."""
    pieces = [tokenizer.convert_tokens_to_string([t]) for t in tokenizer.get_vocab()]
    assert any(">\n<" in p or "><" in p for p in pieces)
    # ...so tokenising a join differs from tokenising its halves separately.
    left, right = "<think>\nthe city\n</think>", "\n<observation>\nx\n</observation>\n\n"
    assert tokenizer.encode(left + right) != tokenizer.encode(left) + tokenizer.encode(right)


def test_every_coa_tag_round_trips(tokenizer):
    for tag in COA_TAGS:
        text = f"<{tag}>a b</{tag}>"
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_chat_template_and_special_tokens(tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n" \
        "<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.eos_token_id != tokenizer.pad_token_id


def test_training_is_deterministic(tokenizer):
    assert train_tiny_tokenizer().get_vocab() == tokenizer.get_vocab()


def test_save_and_load_offline(tokenizer, tmp_path):
    import torch

    model = build_tiny_model(tokenizer)
    save_tiny(tmp_path, tokenizer, model)
    loaded_tok, loaded_model = load_tiny(tmp_path)
    sample = "</think>\n<code>print(1)</code>\n<observation>\n1\n</observation>\n\n"
    assert loaded_tok.encode(sample) == tokenizer.encode(sample)
    assert loaded_tok.padding_side == "left"
    ids = torch.tensor([tokenizer.encode(sample)])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded_model(ids).logits)
    assert loaded_model.config.vocab_size == len(tokenizer)


def test_vllm_engine_generates_token_exact_completions(tmp_path, tokenizer):
    """Runs wherever vllm is importable (GPU machines with the [vllm] extra)."""
    pytest.importorskip("vllm", reason="vllm is not installed (optional [vllm] extra, GPU only)")
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.vllm import VLLMEngine

    save_tiny(tmp_path, tokenizer)
    engine = VLLMEngine(str(tmp_path), dtype="float32", gpu_memory_utilization=0.2,
                        max_model_len=1024, enforce_eager=True)
    prompt = tuple(tokenizer.encode("<|im_start|>assistant\n"))
    completions = engine.generate([GenerationRequest(token_ids=prompt)] * 2,
                                  SamplingParams(max_new_tokens=16, seed=3))
    for completion in completions:
        assert completion.ok
        assert tokenizer.decode(list(completion.token_ids)) == completion.text
        assert len(completion.logprobs) == len(completion.token_ids)
