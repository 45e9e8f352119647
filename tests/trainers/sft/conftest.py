"""Shared fixtures for the SFT tests: a tiny tokenizer, a tiny model, SynthHop oracle data,
synthetic CoA chat data."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the SFT trainer needs torch (extra: train)")
pytest.importorskip("transformers", reason="the SFT trainer needs transformers (extra: train)")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from agents.tiny import train_tiny_tokenizer

    return train_tiny_tokenizer(vocab_size=512)


@pytest.fixture()
def tiny_model(tiny_tokenizer):
    from agents.tiny import build_tiny_model

    return build_tiny_model(tiny_tokenizer, hidden_size=32, layers=2, heads=4, kv_heads=2).train()


@pytest.fixture(scope="session")
def synthhop_trajectories(tmp_path_factory) -> Path:
    """300 oracle trajectories through coa/SynthHop-v0 (real env, real wiki_search tool)."""
    from trainers.data.generate import generate_trajectories

    path = tmp_path_factory.mktemp("synthhop") / "oracle_train.jsonl"
    return generate_trajectories("coa/SynthHop-v0", path, 300,
                                 task_options={"num_tasks": 375, "split": "train"})


@pytest.fixture(scope="session")
def synthhop_heldout(tmp_path_factory) -> Path:
    """Oracle trajectories of SynthHop's test split: questions the training data never has."""
    from trainers.data.generate import generate_trajectories

    path = tmp_path_factory.mktemp("synthhop") / "oracle_test.jsonl"
    return generate_trajectories("coa/SynthHop-v0", path, 40,
                                 task_options={"num_tasks": 375, "split": "test"})


@pytest.fixture(scope="session")
def write_messages_data() -> Callable[[Path, int, int], Path]:
    """``write(path, count, seed)``: ``count`` synthetic CoA answers as chat-messages JSONL."""
    from agents.tiny import synthetic_coa_texts

    def write(path: Path, count: int, seed: int) -> Path:
        rows = [{"messages": [{"role": "user", "content": f"question {i}"},
                              {"role": "assistant", "content": text}]}
                for i, text in enumerate(synthetic_coa_texts(count, seed=seed))]
        path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
        return path

    return write
