"""Continuous batching for the ``hf`` engine: one running batch, rows joining and leaving.

:class:`RunningBatch` is the batch between decode steps: its rows
(:class:`~agents.engines.sampling.RowState`), their keys/values
(:class:`~agents.engines.kv_cache.BatchCache`) and the logits each row samples from next.
One :meth:`RunningBatch.step` admits new rows (prefilling each from its longest stored
prefix), samples a token for every row, retires the finished ones (their keys/values go to
the engine's prefix store, their completions to their callers) and runs one decode forward
for the rest. A row never waits for another: a short turn leaves as soon as it stops, and a
row whose episode was busy in a tool joins at the next step.

Prefill is grouped by suffix length (padding under ~25% of real tokens), and a long prefix
that several newly admitted prompts share beyond what the store covers is prefilled once
and stored as shared (:func:`share_prefixes`): SynthHop prompts share a ~330-token system
prompt, GRPO groups share the whole prompt.

Heavy (torch): imported lazily by :mod:`agents.engines.hf`.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from agents.engines.kv_cache import KV, BatchCache, common_prefix
from agents.engines.sampling import RowState, pick_tokens

if TYPE_CHECKING:
    from agents.engines.hf import HFEngine

__all__ = ["RunningBatch", "left_pad", "length_groups", "prefill", "share_prefixes"]


class RunningBatch:
    """The rows being decoded by ``engine``; call :meth:`step` under the engine's lock."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.rows: list[RowState] = []
        self.cache: BatchCache | None = None
        self.logits: torch.Tensor | None = None

    def step(self, new_rows: list[RowState]) -> None:
        """Admit ``new_rows``, sample one token for every row, retire finished rows, and
        run one decode forward for the others."""
        engine = self.engine
        if new_rows:
            self._admit(new_rows)
        if not self.rows:
            return
        assert self.cache is not None and self.logits is not None
        tokens, logprobs, tops = pick_tokens(self.logits, self.rows)
        keep = []
        for index, (row, token, logprob, top) in enumerate(zip(self.rows, tokens, logprobs, tops,
                                                               strict=True)):
            if row.accept(token, logprob, engine.tokenizer, engine.eos_ids, top):
                if engine.prefix_cache.enabled:  # the keys/values of exactly its fed ids
                    engine.prefix_cache.put(row.fed_ids, self.cache.extract(index))
                engine._finish(row)
            else:
                keep.append(index)
        if not keep:
            self.rows, self.cache, self.logits = [], None, None
            return
        if len(keep) < len(self.rows):
            self.rows = [self.rows[i] for i in keep]
            self.cache.select(keep)
        cache = self.cache
        positions = cache.mask.sum(1, keepdim=True)  # each row's count of real tokens so far
        cache.mask = torch.cat([cache.mask, cache.mask.new_ones((cache.rows, 1))], dim=1)
        next_ids = torch.tensor([[row.generated[-1]] for row in self.rows],
                                device=cache.mask.device)
        with torch.inference_mode():
            output = engine.model(input_ids=next_ids, attention_mask=cache.mask,
                                  position_ids=positions, past_key_values=cache, use_cache=True)
        self.logits = output.logits[:, -1, :]
        engine.stats["decode_steps"] += 1
        engine.stats["decode_rows"] += cache.rows

    def _admit(self, rows: list[RowState]) -> None:
        """Prefill ``rows`` from their longest stored prefixes and join them to the batch."""
        engine = self.engine
        store = engine.prefix_cache
        engine._drop_stale_cache()
        if store.enabled:
            share_prefixes(engine, [row.prompt_ids for row in rows])
        prefixes: list[KV | None] = []
        for row in rows:
            kv, reused = store.take(row.prompt_ids) if store.enabled else (None, 0)
            row.cached_tokens = reused
            prefixes.append(kv)
        suffixes = [row.prompt_ids[row.cached_tokens:] for row in rows]
        parts = [self.cache] if self.rows else []
        logits = [self.logits] if self.rows else []
        ordered = list(self.rows)
        for group in length_groups([len(s) for s in suffixes]):
            cache, last = prefill(engine, [prefixes[i] for i in group],
                                  [suffixes[i] for i in group])
            parts.append(cache)
            logits.append(last)
            ordered.extend(rows[i] for i in group)
        self.cache = BatchCache.concat(parts)  # type: ignore[arg-type]
        self.logits = torch.cat(logits) if len(logits) > 1 else logits[0]  # type: ignore[arg-type]
        self.rows = ordered


def prefill(engine: HFEngine, prefixes: list[KV | None],
            suffixes: list[list[int]]) -> tuple[BatchCache, torch.Tensor]:
    """One forward over ``suffixes`` (left-padded) after their stored ``prefixes``; returns
    the rows' cache and each row's logits at its last token."""
    device = engine.model.device
    input_ids, new_mask = left_pad(suffixes, engine.pad_id, device)
    width = input_ids.shape[1]
    cache = BatchCache.from_prefixes(prefixes, engine._num_layers(), width, device)
    mask = torch.cat([cache.mask, new_mask], dim=1)
    # Positions count real tokens only, so a gap between a prefix and its suffix is invisible.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -width:]
    with torch.inference_mode():
        output = engine.model(input_ids=input_ids, attention_mask=mask,
                              position_ids=positions, past_key_values=cache, use_cache=True,
                              logits_to_keep=1)
    cache.mask = mask
    fed = sum(len(s) for s in suffixes)
    engine.stats["prefill_tokens"] += fed
    engine.stats["cached_tokens"] += int(mask.sum()) - fed
    return cache, output.logits[:, -1, :]


def left_pad(sequences: list[list[int]], pad_id: int,
             device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` with every sequence right-aligned (left padding)."""
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, ids in enumerate(sequences):
        input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        mask[row, width - len(ids):] = 1
    return input_ids.to(device), mask.to(device)


def share_prefixes(engine: HFEngine, prompts: list[list[int]]) -> None:
    """Prefill once, and store as shared, each long prefix that several of ``prompts`` have
    in common beyond what the store already covers (at least ``min_shared_prefix`` more)."""
    if len(prompts) < 2:
        return
    store = engine.prefix_cache
    covered = [store.match_length(p) for p in prompts]
    arrays = [np.asarray(p, dtype=np.int64) for p in prompts]
    order = sorted(range(len(prompts)), key=prompts.__getitem__)  # neighbours share most
    shared: list[list[int]] = []

    def close(run: list[int], common: int) -> None:
        common = min([common] + [len(prompts[i]) - 1 for i in run])  # each row feeds >= 1
        if len(run) > 1 and common - max(covered[i] for i in run) >= engine.min_shared_prefix:
            shared.append(prompts[run[0]][:common])

    run, common = [order[0]], 0
    for previous, current in itertools.pairwise(order):
        n = common_prefix(arrays[previous], arrays[current])
        joined = n if len(run) == 1 else min(common, n)
        if joined >= engine.min_shared_prefix:
            run.append(current)
            common = joined
        else:
            close(run, common)
            run, common = [current], 0
    close(run, common)
    for prefix in shared:
        kv, reused = store.take(prefix)
        cache, _ = prefill(engine, [kv], [prefix[reused:]])
        store.put(prefix, cache.extract(0), shared=True)
        engine.stats["shared_prefixes"] += 1


def length_groups(lengths: list[int], max_tokens: int = 8192,
                  waste: float = 1.25) -> list[list[int]]:
    """Indices grouped for prefill: similar lengths, so padding stays under ~25% of real
    tokens, and at most ``max_tokens`` padded tokens per forward (bounds activations)."""
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        length = lengths[index]
        padded = (len(current) + 1) * length
        if current and (padded > waste * (total + length) + 32 or padded > max_tokens):
            groups.append(current)
            current, total = [], 0
        current.append(index)
        total += length
    if current:
        groups.append(current)
    return groups
