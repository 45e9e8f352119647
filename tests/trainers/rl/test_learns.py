"""Proof that the loop learns: SFT warm start, then DAPO and PPO raise the reward on CPU.

The recipe of the issue: a tiny model (built from config, local tokenizer) SFT'd briefly on
oracle trajectories of ``coa/SynthHop-v0`` 1-hop questions (a ``wiki_search`` call is
needed: the answer is only in the retrieved page), then RL with the real loop. The
policy is measured before and after RL on the env's held-out tasks (never trained on) with
the same sampling seeds (temperature 1, 8 samples per task), so the margin is the policy's
change on unseen questions, not batch noise. Two RL seeds per algorithm; the mean gain must
clear a margin and no seed may get worse. Slow (~8-10 min on 2 busy cores): one shared
warm start (~3 min), then four 40-step RL runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainers.common import deep_merge  # noqa: E402
from trainers.rl.config import RLConfig, load_config  # noqa: E402

pytestmark = pytest.mark.slow

NUM_TASKS = 40  # SynthHop holds out every fifth: 32 to train on, 8 held out for the eval
HELD_OUT = NUM_TASKS // 5
ENV_KWARGS = {"task_options": {"difficulty": "easy", "num_tasks": NUM_TASKS},
              "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}},
              "reward": {"name": "em_f1", "metric": "f1"},
              "system_prompt": "Search the wiki, then answer."}
STEPS = 40
MARGIN = 0.05


def _config(out: Path, **overrides) -> RLConfig:
    """The test run's config; ``overrides`` are dotted keys (``algorithm.name``)."""
    base = {
        "algorithm": {"name": "dapo", "total_steps": STEPS, "prompts_per_step": 8,
                      "group_size": 8, "minibatch_size": 32, "lr": 3e-4},
        "model": {"path": "tiny", "config_overrides": {"hidden_size": 128, "layers": 2}},
        "env": {"id": "coa/SynthHop-v0", "kwargs": ENV_KWARGS, "max_turns": 3},
        "rollout": {"max_new_tokens": 32, "max_response_tokens": 160, "episodes_in_flight": 32},
        "resources": {"use_ray": False, "torch_threads": 1, "micro_batch_size": 8},
        # the loop's own eval: every held-out task x 8 sampling seeds, before step 1 (the
        # warm-started policy) and after the last step
        "bookkeeping": {"save_every": 100, "output_dir": str(out), "tensorboard": False,
                        "plot": False, "eval_every": STEPS, "eval_episodes": 8 * HELD_OUT},
    }
    return load_config(values=deep_merge(base, overrides))


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    from trainers.rl.warmstart import warm_start

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("warm")
    return warm_start(_config(out, **{"model.warm_start": {"episodes": 64, "max_steps": 150,
                                                            "learning_rate": 5e-3}}))


def _eval_rewards(out: Path) -> dict[int, float]:
    from trainers.common import read_metrics

    return {int(r["step"]): r["eval/heldout_reward_mean"] for r in read_metrics(out / "metrics.jsonl")
            if "eval/heldout_reward_mean" in r}


@pytest.mark.parametrize("algorithm", ["dapo", "ppo"])
def test_rl_raises_reward_over_the_warm_started_policy(warm, tmp_path, algorithm):
    from trainers.rl.loop import train

    extra = {"dapo": {},
             "ppo": {"algorithm": {"name": "ppo", "prompts_per_step": 16, "group_size": 4,
                                   "critic_lr": 1e-3}}}[algorithm]
    gains = []
    for seed in (0, 1):
        out = tmp_path / f"{algorithm}{seed}"
        train(_config(out, **{"model.path": str(warm), "bookkeeping.seed": seed}, **extra))
        evals = _eval_rewards(out)
        before, after = evals[0], evals[STEPS]
        assert 0.05 < before < 0.9, f"the warm start left nothing to learn (reward {before:.2f})"
        gains.append(after - before)
        print(f"[learns] {algorithm} seed {seed}: eval reward {before:.3f} -> {after:.3f}")
    assert min(gains) > 0, f"{algorithm}: a seed got worse: gains {gains}"
    assert sum(gains) / len(gains) > MARGIN, f"{algorithm}: gains {gains} below {MARGIN}"
