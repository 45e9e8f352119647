"""The loss mask: trained exactly on generated tokens (and the turn's eos), never on observations."""

from __future__ import annotations

import pytest
import torch

from agents.trajectory import Trajectory
from trainers.data import (
    IGNORE_INDEX,
    Message,
    SftSample,
    TokenizedSample,
    pack_samples,
    pack_to_batch,
    sample_from_trajectory,
    split_observations,
    tokenize_sample,
)
from trainers.sft.attention import set_attention
from trainers.sft.model import loss_sum

GENERATED_1 = "<think>\nsearch the city first\n</think>\n<wiki_search>capital river</wiki_search>"
OBSERVATION_1 = "\n<observation>\nthe capital of the river city is number one\n</observation>\n\n"
GENERATED_2 = "<think>\nthe answer is the capital\n</think>\n<code>print(1 + 2)</code>"
OBSERVATION_2 = "\n<observation>\n3\n</observation>\n\n"
ASSISTANT = GENERATED_1 + OBSERVATION_1 + GENERATED_2 + OBSERVATION_2
PROMPT = [{"role": "system", "content": "You are a helpful agent."},
          {"role": "user", "content": "Which city?"}]


def _sample(text: str = ASSISTANT) -> SftSample:
    messages = tuple(Message(m["role"], m["content"]) for m in PROMPT)
    return SftSample("s", (*messages, Message("assistant", text, split_observations(text))))


def _span_ranges(tokenizer, spans: list[str]) -> list[range]:
    """Token ranges of each span, computed independently of the trainer's labels."""
    start = len(tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True,
                                              return_dict=False))
    ranges = []
    for text in spans:
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        ranges.append(range(start, start + n))
        start += n
    return ranges


def test_trained_tokens_are_the_generated_text_and_the_turn_end(tiny_tokenizer):
    tokenized = tokenize_sample(_sample(ASSISTANT + "<answer>3</answer>"), tiny_tokenizer)
    trained = [t for t, label in zip(tokenized.input_ids, tokenized.labels, strict=True)
               if label != IGNORE_INDEX]
    assert tiny_tokenizer.decode(trained) == GENERATED_1 + GENERATED_2 + "<answer>3</answer><|im_end|>"
    full = tiny_tokenizer.apply_chat_template(
        [*PROMPT, {"role": "assistant", "content": ASSISTANT + "<answer>3</answer>"}], tokenize=False)
    assert tiny_tokenizer.decode(tokenized.input_ids) == full


def test_mask_boundaries_are_span_boundaries_even_where_bpe_merges_across_tags(tiny_tokenizer):
    tokenized = tokenize_sample(_sample(), tiny_tokenizer)
    spans = [GENERATED_1, OBSERVATION_1, GENERATED_2, OBSERVATION_2]
    whole = tiny_tokenizer(ASSISTANT, add_special_tokens=False)["input_ids"]
    per_span = sum(len(tiny_tokenizer(s, add_special_tokens=False)["input_ids"]) for s in spans)
    assert len(whole) != per_span, "the tiny tokenizer should merge across a tag join here"
    for text, span in zip(spans, _span_ranges(tiny_tokenizer, spans), strict=True):
        ids = [tokenized.input_ids[i] for i in span]
        labels = [tokenized.labels[i] for i in span]
        assert tiny_tokenizer.decode(ids) == text
        assert labels == (ids if text.startswith("<think>") else [IGNORE_INDEX] * len(ids))


def test_exact_token_ids_of_a_sampled_trajectory_are_used_verbatim(tiny_tokenizer):
    trajectory = Trajectory("coa/X-v0", "t", prompt_ids=[3, 4, 5])
    trajectory.add_generated("a", token_ids=[10, 11])
    trajectory.add_observation("b", token_ids=[12, 13, 14])
    trajectory.add_generated("c", token_ids=[15, 2])
    tokenized = tokenize_sample(sample_from_trajectory(trajectory), tiny_tokenizer)
    assert tokenized.input_ids == tuple(trajectory.input_ids())
    assert [int(label != IGNORE_INDEX) for label in tokenized.labels] == trajectory.full_loss_mask()


def _loss_and_grads(model, tokenized: TokenizedSample):
    model.zero_grad(set_to_none=True)
    loss = loss_sum(model, pack_to_batch(pack_samples([tokenized], None)[0]), chunked=True)
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in model.parameters()]


def _replace(tokenized: TokenizedSample, position: int, vocab: int) -> TokenizedSample:
    ids = list(tokenized.input_ids)
    ids[position] = (ids[position] + 7) % (vocab - 3)  # stay clear of the special tokens
    labels = list(tokenized.labels)
    if labels[position] != IGNORE_INDEX:
        labels[position] = ids[position]
    return TokenizedSample(tokenized.sample_id, tuple(ids), tuple(labels))


def _same(a, b) -> bool:
    return a[0] == pytest.approx(b[0], abs=1e-6) and all(
        torch.allclose(x, y, atol=1e-7) for x, y in zip(a[1], b[1], strict=True))


@pytest.mark.parametrize("attention", ["varlen", "sdpa"])
def test_observation_tokens_change_neither_loss_nor_gradients(tiny_tokenizer, tiny_model,
                                                              attention):
    """Every observation span is checked in the prefix that ends with it (later generated
    tokens legitimately read the observation; what must not happen is training on it)."""
    set_attention(tiny_model, attention)
    tokenized = tokenize_sample(_sample(), tiny_tokenizer)
    spans = [GENERATED_1, OBSERVATION_1, GENERATED_2, OBSERVATION_2]
    for span in _span_ranges(tiny_tokenizer, spans)[1::2]:
        prefix = TokenizedSample("p", tokenized.input_ids[: span.stop], tokenized.labels[: span.stop])
        reference = _loss_and_grads(tiny_model, prefix)
        for position in (span.start, span.start + len(span) // 2, span.stop - 1):
            changed = _replace(prefix, position, len(tiny_tokenizer))
            assert changed.input_ids != prefix.input_ids
            assert _same(_loss_and_grads(tiny_model, changed), reference)


def test_a_changed_generated_token_changes_loss_and_gradients(tiny_tokenizer, tiny_model):
    tokenized = tokenize_sample(_sample(), tiny_tokenizer)
    reference = _loss_and_grads(tiny_model, tokenized)
    generated = _span_ranges(tiny_tokenizer, [GENERATED_1, OBSERVATION_1, GENERATED_2])[2]
    for position in (generated.start, generated.stop - 1):
        changed = _loss_and_grads(tiny_model, _replace(tokenized, position, len(tiny_tokenizer)))
        assert changed[0] != pytest.approx(reference[0], abs=1e-6)
        assert not all(torch.allclose(x, y) for x, y in zip(changed[1], reference[1], strict=True))


def test_multi_turn_sharegpt_with_observation_turns_trains_every_assistant_turn_only(tiny_tokenizer,
                                                                                    tmp_path):
    """ShareGPT exports may put tool results in their own ``observation`` turns instead of
    inline: those turns (and the user/system turns) carry no loss, every ``gpt`` turn does."""
    import json

    from trainers.data import load_samples

    first = "<think>\nsearch it\n</think>\n<wiki_search>capital river</wiki_search>"
    second = "<answer>the capital</answer>"
    row = {"conversations": [{"from": "human", "value": "Which city?"},
                             {"from": "gpt", "value": first},
                             {"from": "observation", "value": "the capital of the river city"},
                             {"from": "gpt", "value": second}]}
    path = tmp_path / "multi.json"
    path.write_text(json.dumps([row]), encoding="utf-8")
    (sample,) = load_samples(path)
    assert [m.role for m in sample.messages] == ["user", "assistant", "tool", "assistant"]
    tokenized = tokenize_sample(sample, tiny_tokenizer)
    trained = [t for t, label in zip(tokenized.input_ids, tokenized.labels, strict=True)
               if label != IGNORE_INDEX]
    assert tiny_tokenizer.decode(trained) == f"{first}<|im_end|>{second}<|im_end|>"
    rendered = tiny_tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in sample.messages], tokenize=False)
    assert tiny_tokenizer.decode(tokenized.input_ids) == rendered
