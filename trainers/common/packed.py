"""Token scores of one packed row (several samples, attention kept per sample): the SFT loss
and the per-token log-probabilities DPO compares.

Both score only the positions that have a target (model-generated tokens), and can run the LM
head a chunk at a time so the ``T x vocab`` logits of a long row are never all alive.
"""

from __future__ import annotations

from typing import Any

__all__ = ["loss_sum", "token_logps"]


def _trained_hidden(model: Any, batch: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """Decoder states at the positions that have a target: ``(hidden, targets, keep, head)``."""
    targets = batch["targets"].reshape(-1)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.get_decoder()(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                                use_cache=False, **_attn_kwargs(batch)).last_hidden_state
    keep = targets != -100
    return hidden.reshape(-1, hidden.shape[-1])[keep], targets[keep], keep, \
        base.get_output_embeddings()


def _attn_kwargs(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: batch[k] for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
                                  "max_length_k") if k in batch}


def _chunked(fn: Any, hidden: Any, targets: Any, chunk_tokens: int) -> list[Any]:
    """``fn(h, y)`` over chunks of the trained positions, under activation checkpointing when
    gradients are on, so at most one chunk's ``chunk x vocab`` logits are alive."""
    import torch
    from torch.utils.checkpoint import checkpoint

    out = []
    for start in range(0, hidden.shape[0], chunk_tokens):
        h, y = hidden[start:start + chunk_tokens], targets[start:start + chunk_tokens]
        out.append(checkpoint(fn, h, y, use_reentrant=False) if torch.is_grad_enabled()
                   else fn(h, y))
    return out


def loss_sum(model: Any, batch: dict[str, Any], chunked: bool, chunk_tokens: int = 4096) -> Any:
    """Sum of token cross-entropies over trained positions of one packed row.

    ``chunked``: run the decoder, then the LM head only on positions that have a target, a
    chunk at a time under activation checkpointing, so the ``T x vocab`` logits are never all
    alive (they dominate memory for large vocabularies). Otherwise a plain forward.
    """
    import torch
    import torch.nn.functional as F

    targets = batch["targets"].reshape(-1)
    if not chunked:
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                       use_cache=False, **_attn_kwargs(batch)).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets,
                               ignore_index=-100, reduction="sum")
    hidden, targets, _, head = _trained_hidden(model, batch)

    def chunk_loss(h: Any, y: Any) -> Any:
        return F.cross_entropy(head(h).float(), y, reduction="sum")

    total = hidden.new_zeros((), dtype=torch.float32)
    for part in _chunked(chunk_loss, hidden, targets, chunk_tokens):
        total = total + part
    return total


def token_logps(model: Any, batch: dict[str, Any], chunked: bool,
                chunk_tokens: int = 4096) -> Any:
    """Log-probability of each position's target token in one packed row, shape ``[T]``.

    Positions without a target (prompt, observations, each sample's last token) hold 0, so a
    per-sample sum over ``batch``'s segments is the log-likelihood of that sample's trained
    tokens only (what DPO compares). ``chunked`` as in :func:`loss_sum`.
    """
    import torch
    import torch.nn.functional as F

    targets = batch["targets"].reshape(-1)
    if not chunked:
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                       use_cache=False, **_attn_kwargs(batch)).logits
        return -F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets,
                                ignore_index=-100, reduction="none")
    hidden, trained, keep, head = _trained_hidden(model, batch)

    def chunk_logps(h: Any, y: Any) -> Any:
        return -F.cross_entropy(head(h).float(), y, reduction="none")

    parts = _chunked(chunk_logps, hidden, trained, chunk_tokens)
    values = torch.cat(parts) if parts else hidden.new_zeros((0,), dtype=torch.float32)
    return values.new_zeros(targets.shape[0]).masked_scatter(keep, values)
