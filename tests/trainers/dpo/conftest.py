"""Fixtures for the DPO tests: a real K-samples-per-task run over coa/SynthHop-v0 (an oracle
that answers wrong half the time, seeded per episode), its pairs, and tiny models."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the DPO trainer needs torch (extra: train)")
pytest.importorskip("transformers", reason="the DPO trainer needs transformers (extra: train)")

WRONG_ANSWERS = ("Unknown", "Lotre", "Giarelora", "Perrin Kaedoul", "1871")


class NoisyOracle:
    """The oracle's searches, then the gold answer or, half the time, a wrong one (seeded)."""

    def __init__(self, env, episode_seed: int):
        from agents.oracle import OracleAgent

        self.oracle = OracleAgent(env)
        self.rng = random.Random(episode_seed)
        self.wrong = False

    def reset(self, observation, info):
        self.oracle.reset(observation, info)
        self.wrong = self.rng.random() < 0.5

    def act(self, observation, info):
        action = self.oracle.act(observation, info)
        if self.wrong and "<answer>" in action:
            action = action[:action.index("<answer>")] + \
                f"<answer>{self.rng.choice(WRONG_ANSWERS)}</answer>"
        return action


def play_run(out: Path, tasks: int, samples: int) -> Path:
    """``samples`` episodes of each of ``tasks`` SynthHop training tasks, written as coa eval
    writes them (agents.rollout.run_rollouts -> out/trajectories.jsonl)."""
    import gymnasium as gym

    import coa_envs  # noqa: F401
    from agents.rollout import run_rollouts

    run_rollouts(lambda: gym.make("coa/SynthHop-v0", task_options={"split": "train",
                                                                  "num_tasks": 200}),
                 NoisyOracle, task_indices=range(tasks), samples=samples, concurrency=2,
                 out=out / "trajectories.jsonl")
    return out


@pytest.fixture(scope="session")
def noisy_run(tmp_path_factory) -> Path:
    return play_run(tmp_path_factory.mktemp("dpo") / "run", tasks=16, samples=4)


@pytest.fixture(scope="session")
def text_pairs(noisy_run, tmp_path_factory):
    """Pairs from the run (text only: the oracle records no token ids)."""
    from trainers.dpo.pairs import build_pairs, read_run, write_pairs

    trajectories, model, _ = read_run(noisy_run)
    pairs, _ = build_pairs(trajectories, source=str(noisy_run), model=model)
    assert len(pairs) >= 10
    return write_pairs(tmp_path_factory.mktemp("dpo") / "pairs.jsonl", pairs)


@pytest.fixture(scope="session")
def tiny_dir(noisy_run, tmp_path_factory) -> Path:
    """A tiny model directory whose tokenizer is trained on the run's text."""
    from agents.tiny import save_tiny, train_tiny_tokenizer
    from agents.trajectory import read_trajectories

    texts = [t.response_text for t in read_trajectories(noisy_run / "trajectories.jsonl")]
    texts += [m["content"] for t in read_trajectories(noisy_run / "trajectories.jsonl")
              for m in t.prompt_messages]
    tokenizer = train_tiny_tokenizer(texts, vocab_size=1024)
    return save_tiny(tmp_path_factory.mktemp("dpo") / "tiny", tokenizer=tokenizer,
                     hidden_size=32, layers=2, heads=4, kv_heads=2, seed=3)


def with_token_ids(trajectory, tokenizer):
    """The trajectory as a sampling policy records it: prompt ids from the chat template,
    each segment's own ids (what the RL rollout worker writes)."""
    import dataclasses

    from agents.trajectory import Segment

    prompt_ids = list(tokenizer.apply_chat_template(trajectory.prompt_messages,
                                                    add_generation_prompt=True, tokenize=True,
                                                    return_dict=False))
    segments = [Segment(s.kind, s.text, tokenizer.encode(s.text, add_special_tokens=False))
                for s in trajectory.segments]
    return dataclasses.replace(trajectory, prompt_ids=prompt_ids, segments=segments)


@pytest.fixture(scope="session")
def id_pairs(text_pairs, tiny_dir, tmp_path_factory):
    """The same pairs with recorded token ids (the tiny model's tokenizer)."""
    from transformers import AutoTokenizer

    from trainers.dpo.pairs import PreferencePair, read_pairs, write_pairs

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    pairs = [PreferencePair(p.pair_id, with_token_ids(p.chosen, tokenizer),
                            with_token_ids(p.rejected, tokenizer), p.source)
             for p in read_pairs(text_pairs)]
    assert all(p.has_token_ids for p in pairs)
    return write_pairs(tmp_path_factory.mktemp("dpo") / "id_pairs.jsonl", pairs)
