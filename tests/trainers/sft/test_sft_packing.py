"""Packing: whole samples per row, no attention across samples, same loss as unpacked."""

from __future__ import annotations

import pytest
import torch

from agents.tiny import synthetic_coa_texts
from trainers.data import (
    IGNORE_INDEX,
    Message,
    SftSample,
    TokenizedSample,
    TruncationPolicy,
    pack_samples,
    pack_to_batch,
    split_observations,
    tokenize_sample,
    truncate_samples,
)
from trainers.data.packing import SampleTooLongError
from trainers.sft.attention import set_attention
from trainers.sft.model import loss_sum


def _tokenized(tokenizer, n: int = 6) -> list[TokenizedSample]:
    samples = []
    for i, text in enumerate(synthetic_coa_texts(n, seed=3)):
        messages = (Message("user", f"question {i}"),
                    Message("assistant", text, split_observations(text)))
        samples.append(tokenize_sample(SftSample(f"s{i}", messages), tokenizer))
    return samples


def test_first_fit_decreasing_keeps_samples_whole_and_within_budget(tiny_tokenizer):
    samples = _tokenized(tiny_tokenizer, 20)
    budget = max(len(s) for s in samples) + 50
    packs = pack_samples(samples, budget)
    assert len(packs) < len(samples)
    assert all(len(p) <= budget for p in packs)
    assert sorted(i for p in packs for i in p.sample_ids) == sorted(s.sample_id for s in samples)
    by_id = {s.sample_id: s for s in samples}
    for pack in packs:
        start = 0
        for sample_id, n in zip(pack.sample_ids, pack.seq_lens, strict=True):
            assert pack.input_ids[start:start + n] == by_id[sample_id].input_ids
            # targets shift within the sample; a sample's last token predicts nothing
            assert pack.targets[start:start + n] == (*by_id[sample_id].labels[1:], IGNORE_INDEX)
            assert pack.position_ids()[start:start + n] == list(range(n))
            start += n


@pytest.mark.parametrize("attention", ["varlen", "segment_sdpa", "sdpa", "eager"])
def test_packed_loss_and_gradients_equal_the_unpacked_token_mean(tiny_tokenizer, tiny_model,
                                                                 attention):
    """Token-level mean: sum of token losses / number of trained tokens, in both cases."""
    set_attention(tiny_model, attention)
    samples = _tokenized(tiny_tokenizer, 4)
    (pack,) = pack_samples(samples, sum(len(s) for s in samples))
    assert len(pack.seq_lens) == 4

    tiny_model.zero_grad(set_to_none=True)
    packed = loss_sum(tiny_model, pack_to_batch(pack), chunked=True) / pack.num_trained
    packed.backward()
    packed_grads = [p.grad.clone() for p in tiny_model.parameters()]

    tiny_model.zero_grad(set_to_none=True)
    singles = pack_samples(samples, None)
    trained = sum(p.num_trained for p in singles)
    unpacked = sum(loss_sum(tiny_model, pack_to_batch(p), chunked=False) for p in singles) / trained
    unpacked.backward()

    assert float(packed.detach()) == pytest.approx(float(unpacked.detach()), rel=1e-5)
    for got, want in zip(packed_grads, (p.grad for p in tiny_model.parameters()), strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)


def test_no_token_attends_across_a_sample_boundary(tiny_tokenizer, tiny_model):
    """Changing the first sample of a row leaves the second sample's logits untouched."""
    set_attention(tiny_model, "varlen")
    first, second = _tokenized(tiny_tokenizer, 2)
    (pack,) = pack_samples([first, second], len(first) + len(second))
    altered = TokenizedSample(first.sample_id, tuple((t + 5) % 500 for t in first.input_ids),
                              first.labels)
    (pack_altered,) = pack_samples([altered, second], len(first) + len(second))
    with torch.no_grad():
        logits = [tiny_model(**{k: v for k, v in pack_to_batch(p).items() if k != "targets"},
                             use_cache=False).logits[0] for p in (pack, pack_altered)]
    n_second = len(second)
    tail = [x[-n_second:] if pack.sample_ids[-1] == second.sample_id else x[:n_second]
            for x in logits]
    assert torch.allclose(tail[0], tail[1], atol=1e-6)


def test_truncation_policies_report_what_they_cut(tiny_tokenizer):
    samples = _tokenized(tiny_tokenizer, 10)
    limit = sorted(len(s) for s in samples)[5]
    long = [s for s in samples if len(s) > limit]
    kept, report = truncate_samples(samples, limit, TruncationPolicy.TRUNCATE_RIGHT)
    assert report.truncated == len(long) and report.samples_kept == len(kept) == 10
    assert report.tokens_cut == sum(len(s) - limit for s in long)
    assert all(len(s) <= limit for s in kept)
    kept, report = truncate_samples(samples, limit, "drop")
    assert report.dropped_too_long == len(long) and len(kept) == 10 - len(long)
    with pytest.raises(SampleTooLongError, match="max_seq_len"):
        truncate_samples(samples, limit, "error")


def test_samples_with_nothing_left_to_train_are_dropped_and_counted(tiny_tokenizer):
    (sample,) = _tokenized(tiny_tokenizer, 1)
    first_trained = next(i for i, label in enumerate(sample.labels) if label != IGNORE_INDEX)
    kept, report = truncate_samples([sample], first_trained, "truncate_right")
    assert kept == [] and report.dropped_untrainable == 1
