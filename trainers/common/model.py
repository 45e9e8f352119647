"""The one ``model`` section of every trainer (SFT, DPO, RL): what is trained and how it starts.

The shared knobs are spelled once here: ``path`` (``tiny``, a catalogue name, a directory or
hub id), ``tokenizer``, ``tiny`` (the tiny model's sizes), ``random_init`` with
``config_overrides`` (a pretrained architecture with fresh weights), ``init_checkpoint``
(weights loaded over ``path``'s), ``lora`` (:class:`~trainers.common.lora.LoraSection`) and
``gradient_checkpointing``. A trainer subclasses it for what only it needs: SFT and DPO add how
packed rows attend (:class:`PackedModelSection`), RL adds the engines' dtype and its warm start.
:mod:`trainers.common.loading` turns a section into a tokenizer and a model.

Keys renamed when the sections became one keep working for one release with a message:
RL's ``model.config_overrides`` for ``path: tiny`` is ``model.tiny``, its ``random_init`` key is
``model.random_init``; SFT's ``model.lora`` without ``r`` (then LoRA at rank 16) needs ``r``
now, as RL's always did (:func:`moved_model_keys`). Stdlib only at import time.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from coa_envs.configkit import ConfigError, check_fields
from trainers.common.lora import LoraSection

__all__ = ["TINY_DEFAULTS", "ModelSection", "PackedModelSection", "moved_model_keys"]

TINY_DEFAULTS = {"vocab_size": 512, "hidden_size": 64, "layers": 2, "heads": 4, "kv_heads": 2}


@dataclass
class ModelSection:
    """The model trained, and where its weights come from."""

    path: str = "tiny"
    """``tiny`` (a small Qwen2-style model built from ``tiny``, its tokenizer trained in
    process), a catalogue name such as ``smollm2-135m`` (``agents.models``), or a local
    directory / HF id for ``from_pretrained`` (a LoRA adapter directory loads merged into its
    base)."""
    tokenizer: str | None = None
    """Tokenizer path/id when it differs from ``path`` (None: the model's own)."""
    tiny: dict[str, Any] = field(default_factory=lambda: dict(TINY_DEFAULTS))
    """Sizes for ``path: tiny`` (vocab_size, hidden_size, layers, heads, kv_heads, dropout,
    ...); keys left out keep the defaults."""
    random_init: bool = False
    """Build ``path``'s architecture with fresh random weights instead of loading them."""
    config_overrides: dict[str, Any] = field(default_factory=dict)
    """With ``random_init``: keys of the HF model config to change (e.g. ``num_hidden_layers``)."""
    init_checkpoint: str | None = None
    """Directory with saved weights (e.g. an SFT output, or a LoRA adapter over ``path``,
    merged in) loaded over ``path``'s before training starts."""
    lora: LoraSection = field(default_factory=LoraSection)
    """Train LoRA adapters (``r > 0``) beside frozen weights instead of every weight."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% more compute)."""

    def __post_init__(self) -> None:
        if self.lora is None:  # `lora: null` (SFT's old spelling of "no LoRA")
            self.lora = LoraSection()
        check_fields(self, "model.")
        if not self.path:
            raise ConfigError("model.path is empty: name a HF model directory/id, a catalogue name or `tiny`")
        self.tiny = {**TINY_DEFAULTS, **self.tiny}
        if self.path == "tiny" and self.tokenizer:
            raise ConfigError("model.path=tiny trains its own tokenizer; drop model.tokenizer")
        if self.path == "tiny" and self.random_init:
            raise ConfigError("model.path=tiny is always randomly initialised; drop model.random_init "
                              "(its sizes are model.tiny)")
        if self.config_overrides and not self.random_init:
            raise ConfigError("model.config_overrides changes the config of a freshly built model: set "
                              "model.random_init=true (sizes of path=tiny go under model.tiny)")


@dataclass
class PackedModelSection(ModelSection):
    """The model of the trainers that train on packed rows (SFT, DPO)."""

    attention: Literal["varlen", "segment_sdpa", "sdpa", "eager", "flex_attention",
                       "flash_attention_2"] = "varlen"
    """How packed rows attend: ``varlen`` (per-sample; torch's varlen kernel on CUDA),
    ``segment_sdpa``, or a transformers implementation (``sdpa``, ``eager``, ...)."""
    merge_lora_on_save: bool = True
    """Write the final model with the adapter merged, so plain ``from_pretrained`` loads it."""
    compile: bool = False
    """``torch.compile`` each decoder layer (dynamic shapes; one compiled graph serves every
    layer): fuses the norm/activation/rotary element-wise ops and cuts the per-op launch and
    dispatch cost that bounds a small model's step on a GPU. The first steps pay the compile."""


def _moved(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old key is accepted until the next release",
                  FutureWarning, stacklevel=4)


def moved_model_keys(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a whole trainer config mapping, before its sections are built) with the
    renamed model keys in their new places, each announced; a config that sets both
    spellings is refused, and so is ``model: NAME`` (it is a section)."""
    model = data.get("model")
    if isinstance(model, str):
        raise ConfigError(f"model is a section: write `model: {{path: {model}}}` (or model.path={model})")
    if not isinstance(model, Mapping):
        return data
    model = dict(model)
    overrides = model.get("config_overrides")
    if isinstance(overrides, Mapping) and overrides:
        overrides = dict(overrides)
        if "random_init" in overrides:
            _moved("model.config_overrides.random_init", "model.random_init")
            model["random_init"] = overrides.pop("random_init")
        if model.get("path", ModelSection.path) == "tiny":
            if "tiny" in model:
                raise ConfigError("model.config_overrides and model.tiny both give the tiny model's sizes: "
                                  "keep model.tiny")
            _moved("model.config_overrides (the sizes of path=tiny)", "model.tiny")
            model["tiny"], overrides = overrides, {}
        model["config_overrides"] = overrides
    lora = model.get("lora")
    if isinstance(lora, Mapping) and lora and "r" not in lora:
        _moved("model.lora without r (LoRA at rank 16)", "model.lora.r: 16 (r: 0 or no lora is off)")
        model["lora"] = {**lora, "r": 16}
    return {**data, "model": model}
