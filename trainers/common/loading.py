"""One loader for every trainer: a ``model`` section (:mod:`trainers.common.model`) into a
tokenizer and a model, and the model back out in the format inference engines load.

``path: tiny`` builds a small Qwen2-style model (``agents.tiny``) whose tokenizer is trained in
process (on the training texts when the trainer has them); ``random_init`` builds a pretrained
architecture with fresh weights; anything else goes through ``from_pretrained`` (a catalogue
name, hub id or directory; a LoRA adapter directory loads merged into its base). Then
``init_checkpoint`` replaces the weights, and :func:`load_model` adds what training needs
(gradient checkpointing, LoRA: fresh, or the adapter of the checkpoint being resumed).
Checkpoints are written with ``save_pretrained`` and the stock ``sdpa`` attention so
``AutoModelForCausalLM.from_pretrained(dir)`` (the agents' ``hf`` engine) loads them.

Heavy imports (torch, transformers, peft) happen inside the functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainers.common.model import ModelSection, PackedModelSection

__all__ = ["build_model", "checkpointing_enabled", "compile_layers", "load_model", "load_packed_model",
           "load_tokenizer", "load_weights", "save_for_inference", "unwrap"]


def checkpointing_enabled(model: Any) -> bool:
    """Whether ``model`` recomputes activations in backward (transformers 5 renamed the flag
    ``is_gradient_checkpointing`` to ``is_activation_checkpointing``)."""
    name = "is_activation_checkpointing" if hasattr(type(model), "is_activation_checkpointing") \
        else "is_gradient_checkpointing"
    return bool(getattr(model, name, False))


def load_tokenizer(spec: ModelSection, texts: Iterable[str] = (), source: str | Path | None = None) -> Any:
    """The tokenizer of ``source`` (a checkpoint being resumed), else: trained on ``texts``
    (the built-in CoA text when there are none) for ``path: tiny``, else ``from_pretrained``."""
    from transformers import AutoTokenizer

    if source is not None:
        return AutoTokenizer.from_pretrained(source)
    if spec.path == "tiny":
        from agents.tiny import train_tiny_tokenizer

        return train_tiny_tokenizer(list(texts) or None, vocab_size=int(spec.tiny["vocab_size"]))
    from agents.models import adapter_base, find_model

    name = spec.tokenizer or spec.path
    base = adapter_base(name)  # an adapter directory: its own tokenizer, else its base's
    if base is not None and not (Path(name) / "tokenizer_config.json").exists():
        return AutoTokenizer.from_pretrained(base)
    return AutoTokenizer.from_pretrained(find_model(name))  # a name naming nothing fails at once


def build_model(spec: ModelSection, tokenizer: Any, *, seed: int, dtype: Any) -> Any:
    """The configured weights (tiny, random or pretrained), then ``init_checkpoint``'s, in ``dtype``."""
    import torch

    if spec.path == "tiny":
        from agents.tiny import build_tiny_model

        # Everything but the tokenizer's vocab size is a model setting (sizes, dropout, ...).
        sizes = {k: v for k, v in spec.tiny.items() if k != "vocab_size"}
        model = build_tiny_model(tokenizer, seed=seed, **sizes)
    elif spec.random_init:
        from transformers import AutoConfig, AutoModelForCausalLM

        from agents.models import find_model

        hf_config = AutoConfig.from_pretrained(find_model(spec.path), **spec.config_overrides)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(hf_config)
    else:
        from agents.models import load_pretrained

        model = load_pretrained(spec.path, dtype=dtype)
    if spec.init_checkpoint and (Path(spec.init_checkpoint) / "adapter_config.json").exists():
        from peft import PeftModel  # a LoRA adapter over this base: merged in

        model = PeftModel.from_pretrained(model, spec.init_checkpoint).merge_and_unload()
    elif spec.init_checkpoint:
        load_weights(model, Path(spec.init_checkpoint))
    return model.to(dtype)


def load_model(spec: ModelSection, tokenizer: Any, *, seed: int, dtype: Any,
               source: str | Path | None = None, attention: str | None = None, compile: bool = False) -> Any:
    """The model to train, in train mode: :func:`build_model` (or the full weights of
    ``source``, a checkpoint being resumed) with ``attention`` set (packed rows), then
    gradient checkpointing, LoRA (a resumed LoRA run loads its adapter from ``source`` over
    the configured base) and, with ``compile``, :func:`compile_layers`."""
    import torch
    from transformers import AutoModelForCausalLM

    adapter = source is not None and (Path(source) / "adapter_config.json").exists()
    if source is not None and not adapter:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    else:
        model = build_model(spec, tokenizer, seed=seed, dtype=dtype)
    if attention is not None:
        from trainers.common.attention import set_attention

        set_attention(model, attention)
    model.config.use_cache = False
    if spec.gradient_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 name
            model.activation_checkpointing_enable({"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if spec.lora.enabled:
        if adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, source, is_trainable=True)
        else:
            from trainers.common.lora import apply_lora

            model = apply_lora(model, spec.lora, seed)
    if compile:
        compile_layers(model)
    torch.manual_seed(seed)  # the first step's RNG does not depend on how we loaded
    return model.train()


def load_packed_model(config: Any, tokenizer: Any, source: str | Path | None = None,
                      spec: PackedModelSection | None = None) -> Any:
    """The model of a trainer on packed rows (SFT, DPO): its ``model`` section (or ``spec``)
    in the dtype of ``optim.precision`` (bf16 weights for ``bf16_pure``), seeded by
    ``bookkeeping.seed``, attending as ``model.attention`` says."""
    import torch

    spec = spec or config.model
    dtype = torch.bfloat16 if config.optim.precision == "bf16_pure" else torch.float32
    return load_model(spec, tokenizer, seed=config.bookkeeping.seed, dtype=dtype, source=source,
                      attention=spec.attention, compile=spec.compile)


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


def load_weights(model: Any, directory: Path) -> None:
    """Load weights saved by ``save_pretrained`` (safetensors or torch) into ``model``."""
    import torch

    safetensors = sorted(directory.glob("*.safetensors"))
    if safetensors:
        from safetensors.torch import load_file

        state: dict[str, Any] = {}
        for path in safetensors:
            state.update(load_file(str(path)))
    elif (directory / "pytorch_model.bin").exists():
        state = torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    elif (directory / "policy.pt").exists():
        state = torch.load(directory / "policy.pt", map_location="cpu", weights_only=True)
    else:
        raise FileNotFoundError(f"{directory}: no *.safetensors, pytorch_model.bin or policy.pt")
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied embeddings are legitimately absent from the file; anything else is a mismatch.
    missing = [k for k in missing if "lm_head" not in k]
    if missing or unexpected:
        raise ValueError(f"{directory}: weights do not fit the model "
                         f"(missing {missing[:5]}, unexpected {unexpected[:5]})")


def unwrap(model: Any) -> Any:
    """The HF model under DDP/DeepSpeed wrappers and a trainer's loss module."""
    while hasattr(model, "module"):
        model = model.module
    return getattr(model, "model", model) if type(model).__name__ == "CausalLMLoss" else model


def save_for_inference(model: Any, tokenizer: Any, directory: str | Path, *,
                       attention: str, merge_lora: bool = False) -> Path:
    """``save_pretrained`` with stock attention; a LoRA model is merged when asked."""
    from trainers.common.attention import set_attention

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
