"""Shared pieces of the trainer-adapter tests: the SynthHop setup, the tiny models, and a
briefly SFT'd tiny model (our warm start on oracle episodes) that earns some reward."""

from __future__ import annotations

import math
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("trl", reason="needs TRL (extra adapters)")

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trainers.adapters.demo import SYNTHHOP_DEMO, tiny_warm_start

ENV_ID = "coa/SynthHop-v0"
ENV_KWARGS = SYNTHHOP_DEMO


@pytest.fixture
def random_tiny():
    """(tokenizer, model): random weights, 1 layer; it never solves a task."""
    import torch

    from agents.tiny import build_tiny_model, train_tiny_tokenizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tokenizer = train_tiny_tokenizer()
    return tokenizer, build_tiny_model(tokenizer, hidden_size=32, layers=1)


@pytest.fixture(scope="session")
def warm_tiny_dir(tmp_path_factory):
    """A tiny model SFT'd on SynthHop oracle episodes (~20-40 s): it calls the wiki and
    sometimes answers right, so GRPO groups have rewards that differ."""
    import torch

    torch.set_num_threads(1)
    return tiny_warm_start(tmp_path_factory.mktemp("warm"))


def grpo_args(out, **overrides):
    from trl import GRPOConfig

    settings = dict(output_dir=str(out), per_device_train_batch_size=8, num_generations=4, max_steps=3,
                    learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                    beta=0.0, temperature=1.0, max_completion_length=256, seed=0)
    settings.update(overrides)
    return GRPOConfig(**settings)


def step_logs(trainer) -> list[dict]:
    return [row for row in trainer.state.log_history if "loss" in row]


def train_grpo(model, tokenizer, rollout, hook, out, dataset=None, **overrides):
    """TRL's GRPOTrainer over ``rollout`` (its dataset unless ``dataset`` is given) with
    ``hook`` as the rollout function, trained to the end: the trainer and its logged steps,
    each checked to have a finite loss."""
    from trl import GRPOTrainer

    trainer = GRPOTrainer(model=model, processing_class=tokenizer,
                          train_dataset=rollout.dataset() if dataset is None else dataset,
                          args=grpo_args(out, **overrides), reward_funcs=rollout.reward, rollout_func=hook)
    trainer.train()
    logs = step_logs(trainer)
    assert logs and all(math.isfinite(row["loss"]) for row in logs)
    return trainer, logs
