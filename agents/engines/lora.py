"""LoRA adapters on the inference side: the weight-sync record and how engines load it.

A LoRA-trained policy changes only its adapters, so a trainer syncs :class:`LoraWeights`
(the adapter tensors in peft's saved format plus the ``LoraConfig`` fields that shape them)
instead of the whole state dict: for SmolLM2-135M at r=16 that is 19 MB instead of 540 MB
in float32. Engines load it their own way:

* ``hf``: :func:`load_into_model` injects peft's LoRA layers into the plain transformers
  model once (``inject_adapter_in_model``; the model stays a ``PreTrainedModel``, so the
  engine keeps continuous batching and KV reuse) and copies the tensors in on every sync.
* ``vllm``: :func:`write_adapter_dir` writes a peft adapter directory that vLLM's LoRA
  path (``LoRARequest``) loads; each version gets its own directory and request id.

Heavy imports (torch, peft, safetensors) happen inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LoraWeights", "load_into_model", "write_adapter_dir"]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass(frozen=True)
class LoraWeights:
    """Adapter tensors (``adapter_model.safetensors`` keys: ``base_model.model.<module>.
    lora_A.weight``) and the ``LoraConfig`` fields (r, lora_alpha, lora_dropout,
    target_modules) that built them."""

    tensors: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: what a weight sync moves."""
        return int(sum(t.numel() * t.element_size() for t in self.tensors.values()))


def _peft_config(weights: LoraWeights, base_model: str | None = None) -> Any:
    from peft import LoraConfig

    return LoraConfig(task_type="CAUSAL_LM", base_model_name_or_path=base_model,
                      **weights.config)


def load_into_model(model: Any, weights: LoraWeights) -> None:
    """Give ``model`` (a plain transformers model) these adapter weights, injecting the
    adapter layers on the first call. Raises if a tensor fits no adapter."""
    from peft import inject_adapter_in_model, set_peft_model_state_dict

    if not getattr(model, "_coa_lora_injected", False):
        inject_adapter_in_model(_peft_config(weights), model)
        model._coa_lora_injected = True
    result = set_peft_model_state_dict(model, weights.tensors)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(f"adapter tensors fit no module of the engine's model: {unexpected[:4]}")


def write_adapter_dir(weights: LoraWeights, directory: str | Path,
                      base_model: str | None = None) -> Path:
    """A peft adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``)
    holding ``weights``; ``base_model`` is recorded as ``base_model_name_or_path``."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in weights.tensors.items()},
              str(directory / ADAPTER_WEIGHTS))
    _peft_config(weights, base_model).save_pretrained(str(directory))  # adapter_config.json
    return directory
