"""Shared fixtures: the tiny tokenizer/model, saved once per session, and a scripted LM.

``ScriptedLM`` is a torch module with a causal LM's forward signature whose logits put
all mass on a scripted token sequence (one script per generate call). It lets tests pin
down what the hf engine must do with known outputs (stop inside a merged token, eos,
tool calls) while every other piece (engine loop, cache, tokenizer, env) runs for real.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("transformers", reason="needs the [llm] extra")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from agents.tiny import train_tiny_tokenizer

    return train_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    from agents.tiny import build_tiny_model

    return build_tiny_model(tiny_tokenizer)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, tiny_tokenizer, tiny_model):
    from agents.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny"), tiny_tokenizer, tiny_model)


def make_scripted_lm(tokenizer, turns: list[str]):
    """A module that, on its k-th prefill, emits ``tokenizer.encode(turns[k])`` for every row."""
    import torch

    class ScriptedLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.anchor = torch.nn.Parameter(torch.zeros(1))
            self.config = SimpleNamespace(max_position_embeddings=4096)
            self.generation_config = SimpleNamespace(eos_token_id=tokenizer.eos_token_id)
            self.scripts = [tokenizer.encode(t, add_special_tokens=False) for t in turns]
            self.turn = -1
            self.step = 0
            self._cache = None  # a strong reference: ids of freed caches get reused

        @property
        def device(self):
            return self.anchor.device

        def forward(self, input_ids, past_key_values=None, **_: object):
            if past_key_values is not self._cache:  # a fresh cache: the next generate call
                self._cache = past_key_values
                self.turn, self.step = self.turn + 1, 0
            script = self.scripts[min(self.turn, len(self.scripts) - 1)]
            token = script[min(self.step, len(script) - 1)]
            self.step += 1
            logits = torch.full((input_ids.shape[0], 1, len(tokenizer)), -30.0)
            logits[:, :, token] = 30.0
            return SimpleNamespace(logits=logits)

    return ScriptedLM()


@pytest.fixture
def scripted_lm(tiny_tokenizer):
    return lambda turns: make_scripted_lm(tiny_tokenizer, turns)


@pytest.fixture(scope="module")
def served_tiny(tiny_dir):
    """The official ``openai`` client on ``coa serve`` with the tiny model (also ``tiny-alias``)."""
    openai = pytest.importorskip("openai", reason="needs the [llm] extra")
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread

    engine = HFEngine(str(tiny_dir))
    with serve_in_thread(create_app(engine, engine.tokenizer, "tiny", aliases=("tiny-alias",))) as url:
        yield openai.OpenAI(base_url=url, api_key="x", max_retries=0)
