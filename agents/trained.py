"""Trained agents shipped with the package: LoRA adapters over catalogue models, with provenance.

``smollm2-135m-coa`` is the final agent of the CPU recipe (``examples/recipe_smollm2_cpu.yaml``):
a LoRA adapter of SmolLM2-135M-Instruct (``agents/trained/smollm2-135m-coa/``, under 5 MB) that
plays multi-hop SynthHop and MiniWebLarge in the CoA format. Beside the adapter,
``provenance.json`` says where it comes from: the recipe config and seed of the run, the commit
it ran at, its held-out figures with their intervals, and what the low-rank extraction kept.

``agents.models.resolve_model("smollm2-135m-coa")`` resolves the base (converting it once,
as for any catalogue model), merges the adapter into it once and caches the merged plain HF
directory beside the other catalogue models, so every consumer that takes a model name (the
``hf`` engine, ``coa eval``, ``coa serve``, the trainers) uses the agent at the base's speed.
The merged directory carries the adapter's SHA-256: a new adapter is merged again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TRAINED", "TrainedModel", "adapter_dir", "materialise", "provenance"]

_MARKER = "coa_model.json"


@dataclass(frozen=True, slots=True)
class TrainedModel:
    """A trained agent: an adapter in this package over a catalogue base model."""

    name: str
    description: str
    base: str
    """The catalogue name of the base model the adapter adapts."""
    directory: str = ""
    """Where the adapter lives; empty: ``agents/trained/<name>`` in this package."""


TRAINED: dict[str, TrainedModel] = {
    "smollm2-135m-coa": TrainedModel(
        "smollm2-135m-coa",
        "SmolLM2-135M-Instruct after the CPU recipe (examples/recipe_smollm2_cpu.yaml: scripted CoA teacher, "
        "LoRA SFT, LoRA DAPO on a pass-rate pool) on multi-hop SynthHop and MiniWebLarge; rank-8 LoRA",
        "smollm2-135m"),
}
"""Shipped trained agents by name (``coa recipe ship`` copies a finished run's adapter in)."""


def adapter_dir(name: str) -> Path:
    """The package directory holding ``name``'s adapter and provenance."""
    if name not in TRAINED:
        raise KeyError(f"{name!r} is not a shipped trained agent; known: {sorted(TRAINED)}")
    return Path(TRAINED[name].directory or Path(__file__).resolve().parent / "trained" / name)


def provenance(name: str) -> dict[str, Any]:
    """``provenance.json`` of a shipped agent (recipe config, seed, commit, held-out figures)."""
    return json.loads((adapter_dir(name) / "provenance.json").read_text(encoding="utf-8"))


def _digest(directory: Path) -> str:
    sha = hashlib.sha256()
    for file in ("adapter_config.json", "adapter_model.safetensors"):
        sha.update((directory / file).read_bytes())
    return sha.hexdigest()


def _merged(final: Path, digest: str) -> bool:
    try:
        marker = json.loads((final / _MARKER).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    return marker.get("adapter_sha256") == digest


def materialise(name: str, cache_dir: str | Path | None = None) -> str:
    """The merged HF directory of trained agent ``name`` (merged on first use, then reused)."""
    from agents.models import _locked, cache_root

    entry = TRAINED[name]
    source = adapter_dir(name)
    if not (source / "adapter_model.safetensors").is_file():
        raise FileNotFoundError(f"{name}: {source} holds no adapter_model.safetensors; the package "
                                "was installed without its trained agents")
    digest = _digest(source)
    final = cache_root(cache_dir) / name
    if _merged(final, digest):
        return str(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.parent / f".{name}.lock"):
        if not _merged(final, digest):
            _merge(entry, source, final, digest, cache_dir)
    return str(final)


def _merge(entry: TrainedModel, source: Path, final: Path, digest: str,
           cache_dir: str | Path | None) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agents.models import resolve_model

    base = resolve_model(entry.base, cache_dir)
    print(f"[models] merging {entry.name} ({source}) into {base} -> {final} (once)", flush=True)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(source)).merge_and_unload()
    if final.exists():
        shutil.rmtree(final)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=final.parent))
    try:
        model.save_pretrained(staging)
        AutoTokenizer.from_pretrained(base).save_pretrained(staging)
        marker = {"name": entry.name, "base": entry.base, "adapter": str(source),
                  "adapter_sha256": digest}
        (staging / _MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
