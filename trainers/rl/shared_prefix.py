"""Run the prompt that a micro-batch's episodes share once, not once per episode.

A GRPO/DAPO group is ``group_size`` episodes of one task: the same prompt (system prompt,
tool list, question), hundreds of tokens, before the first generated token. The learner
needs logprobs, entropy and values only at generated tokens, so every row's forward over
the prompt exists only to fill the attention keys and values the later tokens read. When
every row of a micro-batch starts with the same ``n`` tokens and none of them needs an
output there, those ``n`` tokens go through the model once (batch 1), their key/value
cache is repeated for the rows, and only the rest of each row is run on top of it.

This is exact, not an approximation: a causal model's prefix states do not depend on what
follows, and gradients reach the shared prefix once per row through the repeated cache
(``repeat_interleave`` sums them back), as if each row had run it. On SynthHop with
SmolLM2 (352-token prompt, ~130 generated and tool tokens per episode) it halves the tokens
the learner's forward and backward passes see.

Anything that would make the shortcut unsafe falls back to the plain forward: a prefix too
short to pay, padding inside it, a model with activation checkpointing (it turns ``use_cache``
off while training; the no-gradient recompute falls back too, so that it scores the tokens the
way the update will), a model whose cache holds more than attention keys and values
(recurrent and state-space layers), and a sharded (FSDP) learner, whose ranks must run the
same collectives. With dropout on while training, the rows of a micro-batch share one dropout
draw over their prompt; RL keeps dropout at 0.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["MIN_SHARED_PREFIX", "prefix_cache", "rank_rows", "shared_prefix_length"]

MIN_SHARED_PREFIX = 16
"""Shorter common prefixes are not worth a second forward call."""


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         needed: torch.Tensor) -> int:
    """How many leading tokens every row shares, with no padding there, before the first
    target-aligned position that any row ``needed`` (position ``t`` scores token ``t + 1``,
    so the token at ``t`` itself must stay outside the prefix). 0 when nothing is shared."""
    import torch

    rows, length = input_ids.shape
    if rows < 2 or length < 2:
        return 0
    wanted = needed[:, :length - 1] > 0
    first_needed = int(torch.where(wanted.any(-1), wanted.float().argmax(-1),
                                   torch.full((rows,), length - 1)).min())
    same = (input_ids == input_ids[:1]).all(0) & (attention_mask > 0).all(0)
    differs = (~same).nonzero()
    common = int(differs[0]) if len(differs) else length
    # at least one token must remain to be run on top of the cache
    return min(first_needed, common, length - 1)


def _plain_attention(cache: Any) -> bool:
    """Every layer (built from the model's config) holds attention keys and values, which
    repeat per row. Recurrent, convolution and state-space layers (Mamba, LFM2, Jamba,
    Qwen3-Next, Falcon-H1) keep states that do not; a cache whose layers the config does not
    name is not trusted either."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer)
                                for layer in layers)


@lru_cache(maxsize=32)
def _cache_argument(model_type: type) -> str:
    """transformers 5 renamed the forward's ``past_key_values`` to ``cache``."""
    params = inspect.signature(model_type.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def prefix_cache(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 length: int) -> tuple[str, Any] | None:
    """``(argument name, cache)``: the key/value cache of row 0's first ``length`` tokens,
    repeated for every row, ready to pass to ``model``'s forward with the rest of the rows;
    ``None`` when the model did not fill it (the caller then runs the plain forward)."""
    from transformers import DynamicCache

    from trainers.common.loading import checkpointing_enabled

    hf_model = model.get_base_model() if hasattr(model, "get_base_model") else model
    if checkpointing_enabled(hf_model):  # also in eval: the recompute must score as the update does
        return None
    cache = DynamicCache(config=hf_model.config)
    if not _plain_attention(cache):  # known before any forward: no prefix pass is wasted
        return None
    name = _cache_argument(type(hf_model))
    model(input_ids=input_ids[:1, :length], attention_mask=attention_mask[:1, :length],
          use_cache=True, logits_to_keep=1, **{name: cache})
    if cache.get_seq_length() != length:  # the model ignored the cache it was given
        return None
    cache.batch_repeat_interleave(input_ids.shape[0])
    return name, cache


def rank_rows(rows: int, rank: int, world: int) -> Any:
    """The positions of a minibatch's ``rows`` that learner ``rank`` of ``world`` trains on: one
    contiguous run each, sizes differing by at most one.

    The minibatch is sorted by group, so a contiguous run keeps a group's episodes on one rank,
    where their micro-batch shares the prompt's pass; striding (rows r, r + world, ...) spread
    every group over all ranks and left each rank little to share. Gradients are summed over
    ranks, so which rank takes which row does not change the update.
    """
    import torch

    return torch.tensor_split(torch.arange(rows), world)[rank]
