"""Packed-sequence attention for HF models without flash-attn: no token attends across samples.

A packed row holds several samples; the trainer passes their boundaries (``cu_seq_lens_q``,
the flash-attn varlen convention) through the model's forward kwargs, which transformers
hands down to the attention function. This module registers an attention implementation,
``coa_varlen``, that uses them:

* on CUDA, PyTorch's own flash varlen kernel (``torch.nn.attention.varlen.varlen_attn``) when
  this torch has it: one kernel over the whole row, no mask materialised;
* otherwise one causal SDPA call per sample (``is_causal=True``: SDPA picks its flash or
  memory-efficient kernel, and no ``T x T`` mask is built).

Its mask function returns no mask, so transformers does not build a dense block-diagonal
``T x T`` mask for a packed 8k row. Registered only while training; checkpoints are saved with
``sdpa`` so inference engines load them with a stock implementation.
"""

from __future__ import annotations

import inspect
from itertools import pairwise
from typing import Any

__all__ = ["ATTENTION_CHOICES", "VARLEN_NAME", "register_varlen_attention", "set_attention"]

VARLEN_NAME = "coa_varlen"
SEGMENT_NAME = "coa_segment_sdpa"
#: ``varlen``: our implementation (kernel on CUDA, per-sample SDPA elsewhere);
#: ``segment_sdpa``: always per-sample SDPA; ``sdpa``/``eager``/``flex_attention``/
#: ``flash_attention_2``: transformers' own, which detect packing from reset position ids.
ATTENTION_CHOICES = ("varlen", "segment_sdpa", "sdpa", "eager", "flex_attention",
                     "flash_attention_2")

_registered = False


def _torch_varlen() -> Any | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def _segment_sdpa(query: Any, key: Any, value: Any, cu_seq_lens: list[int],
                  scaling: float | None, dropout: float) -> Any:
    import torch
    import torch.nn.functional as F

    gqa = query.shape[1] != key.shape[1]
    outputs = []
    for start, end in pairwise(cu_seq_lens):
        outputs.append(F.scaled_dot_product_attention(
            query[:, :, start:end], key[:, :, start:end], value[:, :, start:end],
            is_causal=True, scale=scaling, enable_gqa=gqa, dropout_p=dropout))
    return torch.cat(outputs, dim=2)


def _kernel_varlen(varlen_attn: Any, query: Any, key: Any, value: Any, cu: Any, max_len: int,
                   scaling: float | None) -> Any | None:
    """Run torch's varlen flash kernel, adapting to the signature this torch version has."""
    params = inspect.signature(varlen_attn).parameters
    q = query[0].transpose(0, 1).contiguous()  # (T, H, D)
    k = key[0].transpose(0, 1).contiguous()
    v = value[0].transpose(0, 1).contiguous()
    kwargs: dict[str, Any] = {}
    if q.shape[1] != k.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    if "is_causal" in params:
        kwargs["is_causal"] = True
    elif "window_size" in params:
        kwargs["window_size"] = (-1, 0)
    else:
        return None
    if "scale" in params:
        kwargs["scale"] = scaling
    elif scaling is not None and abs(scaling - q.shape[-1] ** -0.5) > 1e-12:
        return None
    out = varlen_attn(q, k, v, cu, cu, max_len, max_len, **kwargs)
    return out.transpose(0, 1).unsqueeze(0)  # (1, H, T, D)


def _autocast_inputs(query: Any, key: Any, value: Any) -> tuple[Any, Any, Any]:
    """Under CUDA autocast, give q, k and v the autocast dtype, as SDPA's autocast rule does.

    Rotary embeddings multiply the bf16 projections by fp32 cos/sin (the model's weights are
    fp32 master copies), so q and k arrive in fp32 beside a bf16 v; a custom kernel call is
    not covered by autocast and would otherwise see mixed or fp32 inputs.
    """
    import torch

    if not torch.is_autocast_enabled("cuda"):
        return query, key, value
    dtype = torch.get_autocast_dtype("cuda")
    return query.to(dtype), key.to(dtype), value.to(dtype)


def _make_forward(use_kernel: bool) -> Any:
    def forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> Any:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        cu = kwargs.get("cu_seq_lens_q")
        if cu is None or query.shape[0] != 1 or query.shape[2] != key.shape[2]:
            # Not a packed training row (e.g. generation with a cache): stock SDPA.
            return sdpa_attention_forward(module, query, key, value, attention_mask,
                                          dropout=dropout, scaling=scaling, **kwargs)
        out = None
        if query.is_cuda:
            query, key, value = _autocast_inputs(query, key, value)
        # torch's varlen kernel is flash attention: no dropout and 16-bit inputs only; fp32
        # rows and attention dropout take the per-sample SDPA path.
        half = str(query.dtype) in ("torch.bfloat16", "torch.float16")
        if use_kernel and query.is_cuda and half and not dropout and (kernel := _torch_varlen()):
            out = _kernel_varlen(kernel, query, key, value, cu, int(kwargs["max_length_q"]),
                                 scaling)
        if out is None:
            out = _segment_sdpa(query, key, value, [int(x) for x in cu.tolist()], scaling,
                                dropout)
        return out.transpose(1, 2).contiguous(), None

    return forward


def register_varlen_attention() -> None:
    """Register ``coa_varlen`` and ``coa_segment_sdpa`` with transformers (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    def no_mask(*_args: Any, **_kwargs: Any) -> None:
        return None

    for name, use_kernel in ((VARLEN_NAME, True), (SEGMENT_NAME, False)):
        AttentionInterface.register(name, _make_forward(use_kernel))
        AttentionMaskInterface.register(name, no_mask)
    _registered = True


def set_attention(model: Any, choice: str) -> None:
    """Switch a loaded HF model to one of :data:`ATTENTION_CHOICES`."""
    if choice not in ATTENTION_CHOICES:
        raise ValueError(f"attention must be one of {ATTENTION_CHOICES}, not {choice!r}")
    name = {"varlen": VARLEN_NAME, "segment_sdpa": SEGMENT_NAME}.get(choice, choice)
    if name in (VARLEN_NAME, SEGMENT_NAME):
        register_varlen_attention()
    setter = getattr(model, "set_attn_implementation", None)
    if setter is not None:
        try:
            setter(name)
            return
        except (ValueError, ImportError, TypeError):
            if name not in (VARLEN_NAME, SEGMENT_NAME):
                raise
    model.config._attn_implementation = name
    for sub in model.modules():
        config = getattr(sub, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = name
