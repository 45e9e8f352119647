"""LoRA for every trainer: the config section, wrapping a model with peft, adapter-only state.

A LoRA run trains low-rank adapters beside frozen base weights (peft's ``LoraModel``), so
the optimiser holds state for the adapters only, a checkpoint holds the adapters (plus
whatever else trains, e.g. a value head) and a weight sync ships the adapters only
(:class:`agents.engines.lora.LoraWeights`). The base is rebuilt from the config on resume,
so nothing here saves it; :func:`base_reference` says where a saved adapter finds it.

What this module must not do: build the base model itself (each trainer's loader does) or
import torch/peft at import time (configs load without them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.common.config import ConfigError, check_fields

if TYPE_CHECKING:
    from agents.engines.lora import LoraWeights

__all__ = ["LoraSection", "adapter_weights", "apply_lora", "base_reference",
           "load_trainable_state", "lora_config", "save_adapter", "trainable_state"]


@dataclass
class LoraSection:
    """Low-rank adapters instead of full fine-tuning (peft). ``r: 0`` trains every weight."""

    r: int = 0
    """Adapter rank; 0 = off (full fine-tuning). 8-64 is usual; the adapter of SmolLM2-135M
    on every linear layer has 4.9M parameters at r=16 (3.6% of the model)."""
    alpha: float = 32.0
    """Scale numerator: the update is (alpha / r) * B @ A."""
    dropout: float = 0.0
    """Dropout on the adapter input. RL keeps 0: a dropout draw in the update's forward
    would differ from the rollout engine's (eval mode) and bias every importance ratio."""
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"])
    """Module names (or suffixes) that get adapters; ``[all-linear]`` = every linear layer
    except the output head (peft's shorthand)."""
    critic: bool = True
    """PPO with ``algorithm.critic: separate``: adapt the critic's trunk too (its value head
    always trains in full); false trains the whole critic copy."""

    def __post_init__(self) -> None:
        if isinstance(self.target_modules, str):  # `target_modules: all-linear`, as peft writes it
            self.target_modules = [self.target_modules]
        check_fields(self, "model.lora.")
        if self.r < 0:
            raise ConfigError(f"model.lora.r={self.r} must be >= 0 (0 = full fine-tuning)")
        if self.r and self.alpha <= 0:
            raise ConfigError(f"model.lora.alpha={self.alpha} must be > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.lora.dropout={self.dropout} must be in [0, 1)")
        if self.r and not self.target_modules:
            raise ConfigError("model.lora.target_modules is empty: name modules or use "
                              "[all-linear]")

    @property
    def enabled(self) -> bool:
        return self.r > 0


def lora_config(section: LoraSection) -> Any:
    """The peft ``LoraConfig`` the section describes."""
    from peft import LoraConfig

    targets: Any = list(section.target_modules)
    if targets == ["all-linear"]:
        targets = "all-linear"
    return LoraConfig(r=section.r, lora_alpha=section.alpha, lora_dropout=section.dropout,
                      target_modules=targets, task_type="CAUSAL_LM")


def apply_lora(model: Any, section: LoraSection, seed: int) -> Any:
    """``model`` wrapped in a peft ``PeftModel`` with fresh adapters (B = 0: the wrapped
    model computes exactly what the base did). Seeded: LoRA's A matrices come from the
    global RNG, and a resumed run must rebuild the same ones before loading its own."""
    import torch
    from peft import get_peft_model

    from trainers.common.loading import checkpointing_enabled  # loading -> model -> this module

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        wrapped = get_peft_model(model, lora_config(section))
    finally:
        torch.random.set_rng_state(state)
    if checkpointing_enabled(model):
        # checkpointed blocks need an input that requires grad when the embeddings are frozen
        wrapped.enable_input_require_grads()
    return wrapped


def trainable_state(module: Any) -> dict[str, Any]:
    """Only the parameters that train (adapters, value heads), by their names in
    ``module.state_dict()``: what a LoRA checkpoint holds. The frozen base is rebuilt."""
    names = {name for name, p in module.named_parameters() if p.requires_grad}
    return {k: v for k, v in module.state_dict().items() if k in names}


def load_trainable_state(module: Any, state: dict[str, Any]) -> None:
    """Load :func:`trainable_state` output; every trainable parameter must be in it."""
    wanted = {name for name, p in module.named_parameters() if p.requires_grad}
    missing = sorted(wanted - set(state))
    extra = sorted(set(state) - set(module.state_dict()))
    if missing or extra:
        raise ValueError(f"the checkpoint does not fit this model's adapters (missing "
                         f"{missing[:4]}, unexpected {extra[:4]}): was it written with the "
                         "same model.lora settings?")
    module.load_state_dict(state, strict=False)


def adapter_weights(peft_model: Any, dtype: Any = None) -> LoraWeights:
    """The adapter tensors in peft's saved format (``adapter_model.safetensors`` keys), on
    CPU, with the config that made them: what a weight sync sends instead of the model."""
    from peft import get_peft_model_state_dict

    from agents.engines.lora import LoraWeights

    config = peft_model.peft_config["default"]
    tensors = {k: v.detach().to("cpu", dtype or v.dtype)
               for k, v in get_peft_model_state_dict(peft_model).items()}
    targets = config.target_modules
    return LoraWeights(tensors=tensors, config={
        "r": int(config.r), "lora_alpha": float(config.lora_alpha),
        "lora_dropout": float(config.lora_dropout),
        "target_modules": sorted(targets) if isinstance(targets, set | list) else targets,
    })


def base_reference(model_path: str, init_checkpoint: str | None, random_init: bool) -> str | None:
    """Where a saved adapter's base model can be loaded from, or None when the base exists
    nowhere on disk (a ``tiny`` or random-init model, weights from a bare ``policy.pt``) and
    must be saved beside the adapter."""
    if random_init or model_path == "tiny":
        return None
    if init_checkpoint:
        path = Path(init_checkpoint)
        if (path / "config.json").exists() and not (path / "adapter_config.json").exists():
            return str(path.resolve())
        return None
    local = Path(model_path)
    return str(local.resolve()) if local.exists() else model_path  # catalogue name / hub id


def save_adapter(peft_model: Any, tokenizer: Any, directory: str | Path, base: str | None) -> Path:
    """A peft adapter directory (adapter config + weights + tokenizer) whose
    ``base_model_name_or_path`` is ``base``; with ``base`` None the base weights are saved
    into ``<directory>/base`` and named relatively (``agents.models.load_causal_lm`` looks
    beside the adapter first), so the directory loads on its own."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if base is None:
        _save_base(peft_model, directory / "base")
        base = "base"
    peft_model.peft_config["default"].base_model_name_or_path = base
    # no "did the vocabulary change" look-up of the base (a hub request when it is a name)
    peft_model.save_pretrained(str(directory), save_embedding_layers=False)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(directory))
    return directory


def _save_base(peft_model: Any, directory: Path) -> None:
    """The frozen base of ``peft_model`` as a plain HF directory: its state dict without
    the adapter tensors, under the names the unwrapped model uses."""
    model = peft_model.get_base_model()
    state = {}
    for name, tensor in model.state_dict().items():
        if "lora_" in name:
            continue
        state[name.replace(".base_layer.", ".")] = tensor
    model.save_pretrained(str(directory), state_dict=state)
