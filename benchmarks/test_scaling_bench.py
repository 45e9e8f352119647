"""Scaling on this machine: rollout workers, Ray nodes, and the learner's sharding strategy.

Three measurements, each against a baseline taken in the same run, arms interleaved
(round-robin) and repeated; reported as the median with the min..max spread, not asserted
(timing lives here, never in tests):

* rollout episodes/s with 1, 2 and 4 Ray rollout workers on one node (a step = push the
  weights, run the same 32 episodes; ratio against 1 worker);
* 2 rollout workers on 1 Ray node vs on 2 Ray nodes of a local ``ray start`` cluster
  (``trainers/rl/local_cluster.py``): on one machine both arms share the same cores, so the
  ratio isolates what crossing nodes costs (weights and trajectories through two object
  stores instead of one), not what a second machine would add;
* learner tokens/s of one RL update (prepare + update) with 2 gloo ranks, DDP vs FSDP
  (``resources.learner_strategy``), against one process.

Workload: ``coa/SynthHop-v0`` with the real BM25 ``wiki_search`` and a random tiny model
through the real ``hf`` engine: CPU-bound generation, so on 2 cores more than 2 busy
workers cannot help. The load average before and after is printed: figures taken while
other people's jobs share the cores say so.

Run: ``python3 -m pytest benchmarks/test_scaling_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.rllib")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the [llm] extra")

from test_rl_step_bench import _config as step_config  # noqa: E402

from trainers.common import deep_merge  # noqa: E402
from trainers.rl.config import RLConfig  # noqa: E402

EPISODES = 32
REPEATS = 3


# test_rl_step_bench's workload, as Ray rollouts of 32 episodes with up to 3 turns
SCALE = {"algorithm": {"name": "grpo", "kl_coef": 0.0, "total_steps": 1, "prompts_per_step": 8,
                       "group_size": 4, "minibatch_size": 32},
         "env": {"max_turns": 3},
         "rollout": {"max_new_tokens": 24, "max_response_tokens": 256, "tool_threads": 4},
         "resources": {"use_ray": True}, "bookkeeping": {"save_every": 0}}


def _config(out: Path, **overrides) -> RLConfig:
    return step_config(out, **deep_merge(SCALE, overrides))


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) {five:.1f} (5 min) on {os.cpu_count()} cores"


def _interleaved(arms: dict[str, Callable[[], float]], repeats: int = REPEATS
                 ) -> dict[str, list[float]]:
    """Each arm's rates over ``repeats`` rounds, the arms taking turns within a round."""
    rates: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(repeats):
        for name, measure in arms.items():
            rates[name].append(measure())
    return rates


def _report(title: str, rates: dict[str, list[float]], unit: str, baseline: str) -> None:
    base = statistics.median(rates[baseline])
    print(f"\n[scale-bench] {title} ({_load()})")
    for name, samples in rates.items():
        median = statistics.median(samples)
        print(f"[scale-bench]   {name:>22}: {median:8.2f} {unit} (min {min(samples):.2f}, "
              f"max {max(samples):.2f}, n={len(samples)}) x{median / base:.2f} vs {baseline}")


def _rollout_rate(rollouts, weights: dict, jobs: list) -> Callable[[], float]:
    def measure() -> float:
        t0 = time.perf_counter()
        rollouts.set_weights(weights, 0)
        trajectories, stats = rollouts.run(jobs)
        assert len(trajectories) == len(jobs) and stats["rollout/dropped_episodes"] == 0
        return len(jobs) / (time.perf_counter() - t0)
    return measure


def _no_ray() -> None:
    """Shut Ray down, and first collect the previous test's actor handles (held in
    reference cycles): collected after this test's ``ray.init``, they would drop references
    to this session's actors, whose ids repeat (same job id, same counter), and Ray would
    kill those ("all references to the actor were removed")."""
    gc.collect()
    if ray.is_initialized():
        ray.shutdown()


def _jobs() -> list:
    from trainers.rl.rollout import EpisodeJob

    return [EpisodeJob(i % 16, i // 4, i % 4, 1000 + i) for i in range(EPISODES)]


def test_rollout_workers_1_2_4(tmp_path):
    from trainers.rl.actors import RayRollouts
    from trainers.rl.learner import Learner

    _no_ray()
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    try:
        weights = Learner(_config(tmp_path)).policy_state()
        groups = {n: RayRollouts(_config(tmp_path, **{"resources.num_rollout_workers": n}))
                  for n in (1, 2, 4)}
        jobs = _jobs()
        for rollouts in groups.values():  # warm: model load, env index, first forward
            _rollout_rate(rollouts, weights, jobs[:8])()
        rates = _interleaved({f"{n} worker{'s' * (n > 1)}": _rollout_rate(r, weights, jobs)
                              for n, r in groups.items()})
        _report(f"rollout episodes/s, {EPISODES} episodes/step, 1 Ray node", rates,
                "episodes/s", "1 worker")
        for rollouts in groups.values():
            rollouts.close()
    finally:
        ray.shutdown()


def test_rollouts_on_one_vs_two_ray_nodes(tmp_path):
    from trainers.rl.actors import RayRollouts
    from trainers.rl.learner import Learner
    from trainers.rl.local_cluster import LocalRayCluster

    _no_ray()
    with LocalRayCluster() as cluster:
        # ``pack`` slots exist on node a only, ``spread`` slots one per node: the same two
        # workers on one node or on two.
        cluster.start_head(num_cpus=0)
        cluster.add_node("a", num_cpus=3, resources={"bench_pack": 2, "bench_spread": 1})
        cluster.add_node("b", num_cpus=1, resources={"bench_spread": 1})
        cluster.connect(log_to_driver=False)
        try:
            weights = Learner(_config(tmp_path)).policy_state()
            arms = {}
            for name, slot in (("2 workers on 1 node", "bench_pack"),
                               ("2 workers on 2 nodes", "bench_spread")):
                cfg = _config(tmp_path, **{"resources": {
                    "num_rollout_workers": 2, "rollout_resources": {slot: 1},
                    "ray_address": cluster.address}})
                arms[name] = RayRollouts(cfg)
            spread = {cluster.node_name(n) for n in arms["2 workers on 2 nodes"]
                      .worker_nodes().values()}
            packed = {cluster.node_name(n) for n in arms["2 workers on 1 node"]
                      .worker_nodes().values()}
            assert spread == {"a", "b"} and packed == {"a"}
            jobs = _jobs()
            for rollouts in arms.values():
                _rollout_rate(rollouts, weights, jobs[:8])()
            rates = _interleaved({name: _rollout_rate(r, weights, jobs)
                                  for name, r in arms.items()})
            _report("rollout episodes/s, 1 vs 2 Ray nodes (one machine: same cores)", rates,
                    "episodes/s", "2 workers on 1 node")
            for rollouts in arms.values():
                rollouts.close()
        finally:
            ray.shutdown()


def _learner_batch(vocab: int, episodes: int = 32):
    """Random token episodes shaped like agent turns (prompt, 2 x (generated, observation))."""
    from trainers.rl.synthetic import random_batch

    return random_batch(vocab, episodes, seed=3, env_id="bench", reward=lambda i: float(i % 3 == 0),
                        prompt_len=lambda i: 32 + i % 8, generated_len=lambda i, turn: 24 + (i + turn) % 9,
                        observation_len=16)


def test_learner_ddp_vs_fsdp_two_ranks(tmp_path):
    from trainers.rl.actors import RayLearner
    from trainers.rl.learner import Learner

    _no_ray()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        settings = {"algorithm": {"minibatch_size": 16, "ppo_epochs": 1, "kl_coef": 0.0}}
        single = Learner(_config(tmp_path, **settings))
        batch = _learner_batch(single.policy.config.vocab_size)
        tokens = float(batch.mask.sum())
        arms: dict[str, object] = {"1 process": single}
        for strategy in ("ddp", "fsdp"):
            arms[f"2 ranks {strategy}"] = RayLearner(_config(tmp_path, **deep_merge(settings, {
                "resources": {"learner_workers": 2, "learner_strategy": strategy}})))

        def rate(learner) -> Callable[[], float]:
            def measure() -> float:
                t0 = time.perf_counter()
                learner.update(learner.prepare(batch)[0])
                return tokens / (time.perf_counter() - t0)
            return measure

        for learner in arms.values():  # warm
            rate(learner)()
        rates = _interleaved({name: rate(learner) for name, learner in arms.items()})
        _report(f"learner trained tokens/s, prepare + update of {int(tokens)} generated "
                "tokens, gloo on CPU", rates, "tokens/s", "1 process")
        for name, learner in arms.items():
            if name != "1 process":
                learner.close()
    finally:
        ray.shutdown()
