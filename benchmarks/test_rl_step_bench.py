"""RL step time on CPU: where a step goes, and how much env/tool latency the rollout hides.

Workload: ``coa/SynthHop-v0`` (1 hop, real BM25 ``wiki_search``) driven by a random tiny
model through the real ``hf`` engine, with 50 ms of latency added to every env step (a
remote tool's round trip). A random model rarely writes a valid tool call, so every turn
is an env step that returns a corrective observation or a search result, and every
episode runs ``max_turns`` steps: the step count is fixed, which is what the comparison
needs.

Reported, not asserted (2 shared cores make absolute times noisy):

* ``hidden``: the share of the added latency that does *not* show in the rollout's wall
  time when env steps overlap generation (``RolloutWorker(overlap_tools=True)``), measured
  against the serialised baseline (``overlap_tools=False``) in the same run:
  ``1 - (wall_overlap(50ms) - wall_overlap(0)) / (wall_serial(50ms) - wall_serial(0))``.
  Target >= 0.8.
* the step split of a full RL step (generation, env blocking, reference/critic, learner)
  for ``dapo``, ``grpo`` + KL reference and ``ppo`` + value head, from the loop's metrics;
* learner tokens/s against a bare forward+backward of the same batch (the overhead of
  the clipped loss, masking and micro-batching).

Run: ``python3 -m pytest benchmarks/test_rl_step_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the [llm] extra")

import gymnasium as gym  # noqa: E402

from trainers.common import deep_merge  # noqa: E402
from trainers.rl import rollout as rollout_mod  # noqa: E402
from trainers.rl.config import RLConfig, load_config  # noqa: E402

LATENCY_S = 0.05
EPISODES = 16
ENV_KWARGS = {"task_options": {"difficulty": "easy", "num_tasks": 16},
              "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}},
              "system_prompt": "Search the wiki, then answer."}


class _Latency(gym.Wrapper):
    """Adds a fixed delay to every env step, as a remote tool call would."""

    def __init__(self, env: gym.Env, latency_s: float) -> None:
        super().__init__(env)
        self.latency_s = latency_s

    def step(self, action):
        time.sleep(self.latency_s)
        return self.env.step(action)


def _config(out: Path, **overrides) -> RLConfig:
    """The benchmark's config; ``overrides`` are dotted keys (``algorithm.name``)."""
    base = {
        "algorithm": {"name": "dapo", "total_steps": 3, "prompts_per_step": 2, "group_size": 8,
                      "minibatch_size": 16, "dynamic_sampling": False},
        "model": {"path": "tiny", "tiny": {"hidden_size": 64, "layers": 2}},
        "env": {"id": "coa/SynthHop-v0", "kwargs": ENV_KWARGS, "max_turns": 4},
        "rollout": {"max_new_tokens": 16, "max_response_tokens": 512, "episodes_in_flight": 8,
                    "tool_threads": 8},
        "resources": {"use_ray": False, "torch_threads": 1, "micro_batch_size": 8},
        "bookkeeping": {"save_every": 100, "output_dir": str(out), "tensorboard": False,
                        "plot": False, "seed": 0},
    }
    return load_config(values=deep_merge(base, overrides))


@pytest.fixture
def latency(monkeypatch):
    """Set the added env-step latency; every env the RL code makes gets the wrapper."""
    state = {"s": 0.0}
    make = rollout_mod.make_env

    def slow_make(config, heldout=False, env_index=0):
        return _Latency(make(config, heldout, env_index), state["s"])

    monkeypatch.setattr(rollout_mod, "make_env", slow_make)
    return state


def _rollout_wall(worker, jobs, repeats: int = 3) -> tuple[float, float, int]:
    walls, gens, steps = [], [], 0
    for _ in range(repeats):
        result = worker.run(jobs)
        walls.append(result.wall_s)
        gens.append(result.generation_s)
        steps = sum(t.num_turns for t in result.trajectories)
    return statistics.median(walls), statistics.median(gens), steps


def test_tool_latency_hidden_by_overlap(tmp_path, latency):
    from trainers.rl.rollout import EpisodeJob, RolloutWorker

    cfg = _config(tmp_path)
    jobs = [EpisodeJob(i % 16, i, 0, 1000 + i) for i in range(EPISODES)]
    out = {}
    for overlap in (True, False):
        for delay in (0.0, LATENCY_S):
            latency["s"] = delay
            worker = RolloutWorker(cfg, overlap_tools=overlap)
            worker.run(jobs[:2])  # warm: env indexes, first forward
            out[(overlap, delay)] = _rollout_wall(worker, jobs)
            worker.close()
    steps = out[(True, 0.0)][2]
    added = {o: out[(o, LATENCY_S)][0] - out[(o, 0.0)][0] for o in (True, False)}
    hidden = 1.0 - added[True] / max(added[False], 1e-9)
    print(f"\n[rl-bench] {EPISODES} episodes, {steps} env steps, +{LATENCY_S * 1000:.0f} ms each "
          f"(serial total {steps * LATENCY_S:.2f} s)")
    for (overlap, delay), (wall, gen, _) in sorted(out.items()):
        print(f"[rl-bench] overlap={overlap!s:5} latency={delay * 1000:3.0f}ms: "
              f"rollout wall {wall:.2f} s (generation {gen:.2f} s)")
    print(f"[rl-bench] added wall: overlap {added[True]:.2f} s vs serialised {added[False]:.2f} s "
          f"-> overlap hides {hidden:.0%} of the tool latency (target >= 80%)")
    assert steps > 0


@pytest.mark.parametrize("algorithm", ["dapo", "grpo_kl", "ppo"])
def test_rl_step_split(tmp_path, latency, algorithm):
    from trainers.common import read_metrics
    from trainers.rl.loop import train

    latency["s"] = LATENCY_S
    extra = {"dapo": {}, "grpo_kl": {"algorithm": {"name": "grpo", "kl_coef": 0.01}},
             "ppo": {"algorithm": {"name": "ppo", "group_size": 1, "prompts_per_step": 16}}
             }[algorithm]
    train(_config(tmp_path, **extra))
    rows = read_metrics(tmp_path / "metrics.jsonl")[1:]  # step 1 pays one-off warm-up
    keys = ("time/step_s", "time/generation_s", "time/env_blocking_s", "time/env_s",
            "time/ref_critic_s", "time/recompute_s", "time/update_s", "time/learner_s",
            "perf/rollout_tokens_per_s", "perf/learner_tokens_per_s")
    split = {k: statistics.fmean(r.get(k, 0.0) for r in rows) for k in keys}
    print(f"\n[rl-bench] {algorithm} step split (mean of {len(rows)} steps, +50 ms/env step): "
          + json.dumps({k: round(v, 3) for k, v in split.items()}))
    assert split["time/step_s"] > 0


def test_learner_overhead_vs_bare_backward(tmp_path):
    """Tokens/s of Learner.prepare+update vs one plain forward/backward of the same batch."""
    from trainers.rl.learner import Learner
    from trainers.rl.synthetic import random_batch

    torch.set_num_threads(1)
    cfg = _config(tmp_path)
    learner = Learner(cfg)
    batch = random_batch(learner.policy.config.vocab_size, 16, group=8, turns=3, prompt_len=40,
                         generated_len=24, observation_len=30, logprob=-1.0, env_id="bench")
    tokens = float(batch.attention_mask.sum())

    def rl_step() -> None:
        prepared, _ = learner.prepare(batch)
        learner.update(prepared)

    def bare_step() -> None:
        out = learner.policy(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        out.logits.float().logsumexp(-1).mean().backward()
        learner.policy.zero_grad(set_to_none=True)

    timings = {}
    for name, fn in (("bare", bare_step), ("rl", rl_step)):
        fn()
        samples = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        timings[name] = statistics.median(samples)
    print(f"\n[rl-bench] learner: {tokens / timings['rl']:.0f} tok/s (prepare+update) vs bare "
          f"forward+backward {tokens / timings['bare']:.0f} tok/s -> ratio "
          f"{timings['bare'] / timings['rl']:.2f}")
    assert timings["rl"] > 0
