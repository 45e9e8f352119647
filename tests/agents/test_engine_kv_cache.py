"""The hf engine's KV memory: the in-place batch cache and the token-prefix store.

Batch-cache operations are checked against what a model would compute from scratch on the
tiny Llama (real attention, real rotary positions), the store against hand-made entries.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the [llm] extra")

from agents.engines.kv_cache import BatchCache, PrefixCache, supports_kv_reuse  # noqa: E402


def _kv(length: int, value: float, layers: int = 2, heads: int = 2, dim: int = 4):
    return [(torch.full((heads, length, dim), value + layer),
             torch.full((heads, length, dim), -value - layer)) for layer in range(layers)]


def _forward(model, ids: list[int], cache=None, mask=None, positions=None):
    tensor = torch.tensor([ids]) if not isinstance(ids, torch.Tensor) else ids
    with torch.inference_mode():
        return model(input_ids=tensor, attention_mask=mask, position_ids=positions,
                     past_key_values=cache, use_cache=True).logits


def test_batch_cache_rows_with_gaps_match_a_plain_forward(tiny_model):
    """Row 0 resumes from a stored 5-token prefix with a gap before its 2 new tokens;
    row 1 starts from nothing. Both rows' logits equal a plain single-sequence forward."""
    layers = tiny_model.config.num_hidden_layers
    first, second = [5, 9, 14, 3, 22], [31, 8]
    other = [11, 12, 13, 14, 15, 16]
    seed = BatchCache.from_prefixes([None], layers, len(first), "cpu")
    seed.mask = torch.ones((1, len(first)), dtype=torch.long)
    _forward(tiny_model, first, seed, seed.mask)
    stored = seed.extract(0)
    assert stored[0][0].shape[1] == len(first)

    cache = BatchCache.from_prefixes([stored, None], layers, len(other), "cpu")
    new_ids = torch.tensor([[0] * (len(other) - len(second)) + second, other])
    new_mask = torch.tensor([[0] * (len(other) - len(second)) + [1] * len(second),
                             [1] * len(other)])
    mask = torch.cat([cache.mask, new_mask], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -len(other):]
    logits = _forward(tiny_model, new_ids, cache, mask, positions)
    cache.mask = mask
    assert cache.complete()

    reference = _forward(tiny_model, first + second)[0, -1]
    assert torch.allclose(logits[0, -1], reference, atol=1e-5)
    assert torch.allclose(logits[1, -1], _forward(tiny_model, other)[0, -1], atol=1e-5)
    # The gap is real: row 0's keys/values come out as exactly its 7 tokens, in order.
    assert cache.extract(0)[0][0].shape[1] == len(first + second)

    # Decode one more token for both rows after dropping nothing, then after a select.
    cache.select([1, 0])
    step_mask = torch.cat([cache.mask, torch.ones((2, 1), dtype=torch.long)], dim=1)
    step = _forward(tiny_model, torch.tensor([[40], [41]]), cache, step_mask,
                    cache.mask.sum(1, keepdim=True))
    assert torch.allclose(step[1, -1], _forward(tiny_model, first + second + [41])[0, -1],
                          atol=1e-5)
    assert torch.allclose(step[0, -1], _forward(tiny_model, other + [40])[0, -1], atol=1e-5)


def test_select_drops_columns_no_row_uses_and_concat_left_pads():
    layers = [_kv(6, 1.0), _kv(3, 2.0)]
    cache = BatchCache.from_prefixes(layers, 2, 0, "cpu")
    assert cache.width == 6 and cache.mask.tolist()[1] == [0, 0, 0, 1, 1, 1]
    cache.select([1])  # the long row leaves: its 3 leading columns go with it
    assert cache.width == 3 and cache.mask.tolist() == [[1, 1, 1]]
    assert torch.equal(cache.extract(0)[1][0], layers[1][1][0])

    other = BatchCache.from_prefixes([_kv(5, 3.0)], 2, 0, "cpu")
    both = BatchCache.concat([cache, other])
    assert both.width == 5 and both.mask.tolist() == [[0, 0, 1, 1, 1], [1] * 5]
    assert torch.equal(both.extract(0)[0][1], layers[1][0][1])
    assert torch.equal(both.extract(1)[1][0], _kv(5, 3.0)[1][0])
    assert torch.count_nonzero(both.layers[0].keys[0, :, :2]) == 0  # pads are zeros, not junk


def test_buffer_grows_in_place_without_losing_columns(tiny_model):
    layers = tiny_model.config.num_hidden_layers
    cache = BatchCache.from_prefixes([None], layers, 1, "cpu")
    ids = list(range(3, 3 + 150))  # > the initial capacity: forces a growth
    mask = torch.ones((1, 0), dtype=torch.long)
    for position, token in enumerate(ids):
        mask = torch.cat([mask, torch.ones((1, 1), dtype=torch.long)], dim=1)
        logits = _forward(tiny_model, [token], cache, mask, torch.tensor([[position]]))
    cache.mask = mask
    assert cache.complete() and cache.width == len(ids)
    assert torch.allclose(logits[0, -1], _forward(tiny_model, ids)[0, -1], atol=1e-4)


def test_prefix_store_hands_over_owned_entries_and_keeps_shared_ones():
    store = PrefixCache(max_bytes=1 << 20)
    store.put([1, 2, 3, 4], _kv(4, 1.0))
    store.put([1, 2, 9], _kv(3, 2.0), shared=True)
    kv, n = store.take([1, 2, 3, 4, 5, 6])  # the episode's own entry: handed over
    assert n == 4 and len(store) == 1 and torch.equal(kv[0][0], _kv(4, 1.0)[0][0])
    kv, n = store.take([1, 2, 9, 7])  # shared: stays
    assert n == 3 and len(store) == 1
    kv, n = store.take([1, 2, 5])  # a partial match is copied from, never taken
    assert n == 2 and kv[0][0].shape[1] == 2 and len(store) == 1
    assert store.take([1, 2, 9])[1] == 2  # one token is always left to feed
    assert store.take([8, 8, 8]) == (None, 0)


def test_prefix_store_is_bounded_and_releases_an_episode():
    one = _kv(4, 1.0)
    size = sum(k.numel() * 4 * 2 for k, _ in one)
    store = PrefixCache(max_bytes=2 * size)
    store.put([1, 2, 3, 4], one)
    store.put([5, 6, 7, 8], _kv(4, 2.0))
    store.put([9, 9, 9, 9], _kv(4, 3.0))  # over budget: the least recently used goes
    assert len(store) == 2 and store.evictions == 1 and store.nbytes <= store.max_bytes
    assert store.match_length([1, 2, 3, 4, 0]) == 0 and store.match_length([5, 6, 7, 8, 0]) == 4

    store = PrefixCache(max_bytes=1 << 20)
    store.put([5, 6, 7, 8], _kv(4, 1.0))  # an episode's turn 1 ...
    store.put([5, 6, 7, 8, 1, 4], _kv(6, 1.0))  # ... and turn 2
    store.put([5, 6], _kv(2, 1.0), shared=True)  # a prompt prefix others use too
    store.put([5, 6, 0, 0], _kv(4, 1.0))  # another episode
    assert store.release([5, 6, 7, 8, 1, 4, 4]) == 2  # the ended episode's entries only
    assert len(store) == 2 and store.match_length([5, 6, 0, 0, 3]) == 4
    assert not PrefixCache(0).put([1, 2], one)  # disabled
    with pytest.raises(ValueError):
        PrefixCache(-1)


def test_kv_reuse_support_is_detected(tiny_model):
    from transformers import MistralConfig, MistralForCausalLM

    assert supports_kv_reuse(tiny_model)
    windowed = MistralForCausalLM(MistralConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                                num_attention_heads=2, num_key_value_heads=1,
                                                intermediate_size=64, sliding_window=8))
    assert not supports_kv_reuse(windowed)  # a window forgets: a stored prefix cannot resume
    assert not supports_kv_reuse(torch.nn.Linear(2, 2))
