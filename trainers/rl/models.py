"""Policy, critic and reference models for the RL learner, and their token-level outputs.

The policy is any HF causal LM. PPO's critic is either a linear value head on the
policy's last hidden state (shared trunk, one forward for both) or a separate copy of
the trunk with its own head. All outputs are target-aligned with ``RLBatch`` (position
``t`` scores input token ``t + 1``): the logprob the model gives that token and the value
of the state *before* it is generated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from trainers.rl.config import RLConfig

__all__ = ["ModelOutputs", "ValueHead", "forward_tokens", "load_tokenizer_and_policy"]


@dataclass
class ModelOutputs:
    """Target-aligned per-token outputs of one forward pass."""

    logprobs: torch.Tensor  # [B, L-1]
    entropy: torch.Tensor | None  # [B, L-1]
    values: torch.Tensor | None  # [B, L-1]


def _dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_tokenizer_and_policy(config: RLConfig, dtype: str | None = None) -> tuple[Any, Any]:
    """``(tokenizer, causal LM)`` of ``config.model``, by the loader every trainer shares
    (:mod:`trainers.common.loading`: ``tiny``, ``random_init``, a pretrained path or adapter
    directory, then ``init_checkpoint``). ``model.lora`` is applied by the learner, not here.
    The weights are cast to ``dtype`` (default ``model.dtype``; the learner asks for float32
    masters); a tokenizer without a pad token pads with its eos."""
    import torch

    from trainers.common.loading import build_model, load_tokenizer

    spec = config.model
    tokenizer = load_tokenizer(spec)
    model = build_model(spec, tokenizer, seed=config.bookkeeping.seed, dtype=torch.float32)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model.to(_dtype(dtype or spec.dtype))


def ValueHead(hidden_size: int) -> Any:
    """A zero-initialised linear value head: the critic starts by predicting 0 everywhere."""
    import torch

    head = torch.nn.Linear(hidden_size, 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head


def forward_tokens(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    value_head: Any = None,
    with_entropy: bool = False,
    with_logits: bool = True,
    entropy_grad: bool = False,
    temperature: float = 1.0,
    needed: torch.Tensor | None = None,
) -> ModelOutputs:
    """One forward: logprobs of the given next tokens, optional entropy and values.

    Logits come from the model's own forward, so whatever it does after the LM head
    (Gemma-2's final-logit softcapping, a logit scale) is in the learner's logprobs exactly
    as in the engines' (which call the same forward); scoring ``lm_head(hidden)`` directly
    would silently drop it. A value head reads the hidden states the LM head reads (caught
    by a forward hook on the output embeddings), so the critic costs no second pass.
    Logprobs use ``logsumexp`` instead of a full ``log_softmax`` copy of the logits.

    ``needed`` ([B, L-1], the loss mask) says which positions' outputs the caller reads: a
    prompt that every row shares and none of them needs runs once for the batch
    (:mod:`trainers.rl.shared_prefix`) and its positions come back as zeros.
    """
    import torch

    from trainers.rl.algorithms import entropy_from_logits

    if not with_logits:  # a critic-only pass: the trunk's last hidden state is all it needs
        hf_model = model.get_base_model() if hasattr(model, "get_base_model") else model
        trunk = getattr(hf_model, hf_model.base_model_prefix)
        hidden = trunk(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return ModelOutputs(logprobs=torch.empty(0), entropy=None,
                            values=_values(value_head, hidden[:, :-1]))
    captured: list[Any] = []
    hook = None
    if value_head is not None:
        hook = model.get_output_embeddings().register_forward_hook(
            lambda _module, args, _out: captured.append(args[0]))
    try:
        start, logits = _logits(model, input_ids, attention_mask, needed)
    finally:
        if hook is not None:
            hook.remove()
    values = _values(value_head, captured[-1][:, :-1]) if value_head is not None else None
    # The engine reports log_softmax(logits / T) of what it sampled; score the same quantity
    # or every importance ratio is off by the temperature.
    logits = logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, start + 1:]
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logprobs = picked - torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy:
        # Entropy is a metric unless it is in the loss; detaching saves a [B, L, V] graph.
        entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    return ModelOutputs(logprobs=_from(start, logprobs), entropy=_from(start, entropy),
                        values=_from(start, values))


def _logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
            needed: torch.Tensor | None) -> tuple[int, torch.Tensor]:
    """``(start, logits)``: the model's logits from input position ``start`` on; past 0
    only when a shared prompt prefix ran once for the batch."""
    from trainers.rl.shared_prefix import MIN_SHARED_PREFIX, prefix_cache, shared_prefix_length

    start = 0 if needed is None else shared_prefix_length(input_ids, attention_mask, needed)
    shared = prefix_cache(model, input_ids, attention_mask, start) \
        if start >= MIN_SHARED_PREFIX else None
    if shared is None:
        return 0, model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    name, cache = shared
    return start, model(input_ids=input_ids[:, start:], attention_mask=attention_mask,
                        use_cache=True, **{name: cache}).logits


def _from(start: int, per_token: torch.Tensor | None) -> torch.Tensor | None:
    """Outputs of positions ``start`` on, placed back at full length (zeros before)."""
    if per_token is None or start == 0:
        return per_token
    import torch

    return torch.nn.functional.pad(per_token, (start, 0))


def _values(value_head: Any, hidden: torch.Tensor) -> torch.Tensor | None:
    if value_head is None:
        return None
    return value_head(hidden.to(value_head.weight.dtype)).squeeze(-1).float()
