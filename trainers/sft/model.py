"""Load the model and tokenizer the SFT trainer trains, and save what inference engines load.

``model: tiny`` builds a small Qwen2 with a tokenizer trained on the training texts
(``agents.tiny``); anything else goes through ``from_pretrained`` (a local directory or an
HF id). LoRA wraps the model with peft. Checkpoints are written with ``save_pretrained`` and
the stock ``sdpa`` attention so ``AutoModelForCausalLM.from_pretrained(dir)`` (the agents'
``hf`` engine) loads them without this package.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainers.sft.attention import set_attention
from trainers.sft.config import SFTConfig

__all__ = ["load_model", "load_tokenizer", "loss_sum", "save_for_inference", "token_logps", "unwrap"]


def load_tokenizer(config: SFTConfig, texts: Iterable[str] = (), source: str | None = None) -> Any:
    """The tokenizer: trained on ``texts`` for ``model: tiny``, else ``from_pretrained``."""
    from transformers import AutoTokenizer

    from agents.models import resolve_model

    if source is not None:
        return AutoTokenizer.from_pretrained(source)
    spec = config.model
    if spec.path == "tiny":
        from agents.tiny import train_tiny_tokenizer

        return train_tiny_tokenizer(list(texts), vocab_size=int(spec.tiny["vocab_size"]))
    return AutoTokenizer.from_pretrained(resolve_model(spec.tokenizer or spec.path))


def _dtype(config: SFTConfig) -> Any:
    import torch

    return torch.bfloat16 if config.optim.precision == "bf16_pure" else torch.float32


def load_model(config: SFTConfig, tokenizer: Any, source: str | None = None) -> Any:
    """Build or load the model, then apply dtype, attention, checkpointing and LoRA.

    ``source`` is a checkpoint directory to resume from (full weights, or a LoRA adapter on
    top of the configured base model).
    """
    import torch
    from transformers import AutoModelForCausalLM

    spec, seed = config.model, config.bookkeeping.seed
    adapter = source is not None and (Path(source) / "adapter_config.json").exists()
    weights = source if source is not None and not adapter else None
    if weights is not None:
        model = AutoModelForCausalLM.from_pretrained(weights, dtype=_dtype(config))
    elif spec.path == "tiny":
        from agents.tiny import build_tiny_model

        # Everything but the tokenizer's vocab size is a model setting (sizes, dropout, ...).
        sizes = {k: v for k, v in spec.tiny.items() if k != "vocab_size"}
        model = build_tiny_model(tokenizer, seed=seed, **sizes).to(_dtype(config))
    else:
        from agents.models import resolve_model

        model = AutoModelForCausalLM.from_pretrained(resolve_model(spec.path), dtype=_dtype(config))
    set_attention(model, spec.attention)
    model.config.use_cache = False
    if spec.gradient_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 name
            model.activation_checkpointing_enable({"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if spec.lora is not None:
        from peft import LoraConfig, PeftModel, get_peft_model

        if adapter:
            model = PeftModel.from_pretrained(model, source, is_trainable=True)
        else:
            torch.manual_seed(seed)  # LoRA's A matrices are drawn from the global RNG
            lora = dict(spec.lora)
            model = get_peft_model(model, LoraConfig(
                r=int(lora.get("r", 16)),
                lora_alpha=int(lora.get("alpha", 32)),
                lora_dropout=float(lora.get("dropout", 0.0)),
                target_modules=lora.get("target_modules", "all-linear"),
                task_type="CAUSAL_LM",
            ))
    if spec.compile:
        compile_layers(model)
    torch.manual_seed(seed)  # the first step's RNG does not depend on how we loaded
    return model.train()


def compile_layers(model: Any) -> int:
    """``torch.compile`` every decoder layer in place; returns how many were compiled.

    Layers, not the whole model: the layers share one code path, so torch compiles one graph
    and reuses it for all of them (parameters are graph inputs), the chunked LM-head loss
    stays eager, and a packed row's varying length is a dynamic dimension, not a recompile.
    State-dict keys are unchanged (``Module.compile`` wraps ``forward`` only), so checkpoints
    load into an uncompiled model.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(base.get_decoder(), "layers", None)
    if layers is None:
        raise ValueError(f"model.compile: {type(base).__name__} has no decoder.layers to compile")
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)


def unwrap(model: Any) -> Any:
    """The HF model under DDP/DeepSpeed wrappers and our loss module."""
    while hasattr(model, "module"):
        model = model.module
    return getattr(model, "model", model) if type(model).__name__ == "CausalLMLoss" else model


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


def save_for_inference(model: Any, tokenizer: Any, directory: str | Path, *,
                       attention: str, merge_lora: bool = False) -> Path:
    """``save_pretrained`` with stock attention; a LoRA model is merged when asked."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = unwrap(model)
    if merge_lora and hasattr(model, "merge_and_unload"):
        import copy

        model = copy.deepcopy(model).merge_and_unload()
    hf_model = model.get_base_model() if hasattr(model, "get_base_model") else model
    set_attention(hf_model, "sdpa")
    hf_model.config.use_cache = True
    try:
        model.save_pretrained(directory)
    finally:
        set_attention(hf_model, attention)
        hf_model.config.use_cache = False
    if tokenizer is not None:  # a model trained on recorded token ids may have none
        tokenizer.save_pretrained(directory)
    return directory
