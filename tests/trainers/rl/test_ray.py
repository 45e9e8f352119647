"""Ray mode: the same loop with actors, and a rollout worker killed mid-run is restarted."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.rllib")
torch = pytest.importorskip("torch")

from trainers.common import deep_merge  # noqa: E402
from trainers.rl.config import RLConfig, load_config  # noqa: E402

ENV_KWARGS = {"task_options": {"difficulty": "easy", "num_tasks": 16},
              "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}},
              "system_prompt": "Search the wiki, then answer."}


def _config(out, **overrides) -> RLConfig:
    """The test run's config; ``overrides`` are dotted keys (``algorithm.name``)."""
    base = {
        "algorithm": {"name": "grpo", "kl_coef": 0.01, "total_steps": 2, "prompts_per_step": 2,
                      "group_size": 2, "minibatch_size": 4},
        "model": {"path": "tiny", "config_overrides": {"hidden_size": 32, "layers": 1}},
        "env": {"id": "coa/SynthHop-v0", "kwargs": ENV_KWARGS, "max_turns": 2},
        "rollout": {"max_new_tokens": 8, "max_response_tokens": 48},
        "resources": {"use_ray": True, "torch_threads": 1, "num_rollout_workers": 1,
                      "cpus_per_worker": 1, "micro_batch_size": 4},
        "bookkeeping": {"save_every": 1, "output_dir": str(out), "tensorboard": False,
                        "plot": False},
    }
    return load_config(values=deep_merge(base, overrides))


@pytest.fixture(scope="module")
def local_ray():
    started = not ray.is_initialized()
    if started:
        # logical CPUs: 2 learner ranks + 1 rollout worker fit one placement group
        ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def test_ray_loop_runs_with_actors_and_a_reference_model(local_ray, tmp_path):
    from trainers.rl.loop import train

    last = train(_config(tmp_path))
    assert last["rollout/episodes"] == 4
    assert last["rollout/dropped_episodes"] == 0
    assert "kl/ref" in last  # grpo with kl_coef loads the reference in the learner actor
    assert last["mismatch/logprob_abs_diff"] < 1e-3  # weights reached the worker actor
    assert (tmp_path / "checkpoint-2" / "COMPLETE").exists()


def test_ray_asynchronous_loop_streams_to_two_worker_actors(local_ray, tmp_path):
    """max_staleness 1 with two rollout actors: the workers stream episodes while the learner
    trains, weights are offered to both, and no episode is more than one version stale."""
    import json

    from trainers.rl.loop import train

    last = train(_config(tmp_path, **{"algorithm": {"total_steps": 4, "max_staleness": 1,
                                                    "importance_correction": "tis"},
                                      "resources.num_rollout_workers": 2,
                                      "bookkeeping": {"eval_every": 2, "eval_episodes": 4}}))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0]
    assert len(steps) == 4 and all(r["rollout/episodes"] == 4 for r in steps)
    assert all(r["async/staleness_max"] <= 1 and r["async/dropped_stale_episodes"] == 0
               for r in steps)
    assert [r["step"] for r in rows if "eval/heldout_reward_mean" in r] == [0, 2, 4]
    assert last["mismatch/ratio_max"] < 10  # the workers serve recent weights
    assert (tmp_path / "final").is_dir()


@pytest.mark.slow
def test_ray_streaming_worker_killed_mid_run_has_its_episodes_resubmitted(local_ray, tmp_path):
    from trainers.rl.actors import RayRollouts
    from trainers.rl.learner import Learner
    from trainers.rl.rollout import EpisodeJob

    cfg = _config(tmp_path, **{"rollout": {"max_new_tokens": 32, "max_response_tokens": 200,
                                           "max_episode_retries": 1},
                               "env.max_turns": 3, "algorithm.max_staleness": 1})
    rollouts = RayRollouts(cfg)
    rollouts.set_weights(Learner(cfg).policy_state(), 0)
    (actor,) = rollouts.manager.actors().values()
    pid = ray.get(actor.apply.remote(lambda w: os.getpid()))
    rollouts.start_stream()
    episodes = 120
    rollouts.submit([(i, EpisodeJob(i % 16, i, 0, i, step=1)) for i in range(episodes)])
    time.sleep(1.0)
    os.kill(pid, signal.SIGKILL)
    done: set = set()
    lost: list = []
    deadline = time.monotonic() + 600
    while len(done) + len(lost) < episodes and time.monotonic() < deadline:
        keys, result = rollouts.collect(timeout=0.5)
        done.update(keys)
        lost.extend(getattr(result, "lost_keys", []))
    rollouts.stop_stream()
    rollouts.close()
    assert not lost and done == set(range(episodes))  # resubmitted to the restarted worker
    assert rollouts.restarts >= 1


@pytest.mark.slow
@pytest.mark.parametrize("retries", [1, 0])
def test_killed_rollout_worker_is_restarted_and_its_episodes_retried_or_counted(
        local_ray, tmp_path, retries):
    from trainers.rl.actors import RayRollouts
    from trainers.rl.learner import Learner
    from trainers.rl.rollout import EpisodeJob

    cfg = _config(tmp_path, **{"rollout": {"max_new_tokens": 32, "max_response_tokens": 200,
                                           "max_episode_retries": retries},
                               "env.max_turns": 3})
    rollouts = RayRollouts(cfg)
    rollouts.set_weights(Learner(cfg).policy_state(), 0)
    (actor,) = rollouts.manager.actors().values()
    pid = ray.get(actor.apply.remote(lambda w: os.getpid()))
    # Enough episodes that the shard is still running when the kill lands, on a fast idle
    # machine too (64 episodes took under 3 s there): the kill must hit a busy worker.
    episodes = 320
    jobs = [EpisodeJob(i % 16, i, 0, i) for i in range(episodes)]
    out: dict = {}
    runner = threading.Thread(target=lambda: out.update(result=rollouts.run(jobs)))
    runner.start()
    time.sleep(1.0)
    assert runner.is_alive(), "the shard finished before the kill; make it longer"
    os.kill(pid, signal.SIGKILL)
    runner.join(timeout=600)
    trajectories, stats = out["result"]
    if retries:
        assert stats["rollout/worker_restarts"] >= 1
        assert len(trajectories) == episodes and stats["rollout/dropped_episodes"] == 0
        new_pid = ray.get(actor.apply.remote(lambda w: os.getpid()))
        assert new_pid != pid
        # the restarted worker got the current weights before serving again
        assert ray.get(actor.apply.remote(lambda w: w.weights_version)) == 0
    else:
        assert trajectories == [] and stats["rollout/dropped_episodes"] == episodes
        # Not waited for within the step that lost its episodes; back for the next one.
        more, later = rollouts.run(jobs[:4])
        assert len(more) == 4 and later["rollout/worker_restarts"] >= 1
    rollouts.close()


def _random_batch(vocab: int, episodes: int = 8, group_prompt: bool = False):
    from trainers.rl.synthetic import random_batch

    # a shared prompt must be long enough for the learner to run it once (MIN_SHARED_PREFIX)
    return random_batch(vocab, episodes, seed=3, env_id="ddp", reward=lambda i: float(i % 3 == 0),
                        prompt_len=lambda i: (20 if group_prompt else 6) + i,
                        generated_len=lambda i, turn: 4 + (i + turn) % 5, observation_len=5,
                        group_prompt=group_prompt)


@pytest.mark.parametrize(("algorithm", "group_prompt"), [
    ("dapo", False), ("dapo", True), pytest.param("grpo", False, marks=pytest.mark.slow)])
def test_two_ddp_learner_ranks_update_like_one_process(local_ray, tmp_path, algorithm, group_prompt):
    """Two gloo DDP ranks, each on half of every minibatch, end with the weights one
    process gets from the whole minibatch (token-mean and seq-mean aggregation); with a
    group's episodes sharing their prompt, each rank runs its groups' prompts once."""
    from trainers.rl.actors import RayLearner
    from trainers.rl.learner import Learner

    settings = {"algorithm": {"name": algorithm, "kl_coef": 0.0, "group_size": 4,
                              "prompts_per_step": 2, "minibatch_size": 8, "lr": 1e-2,
                              "ppo_epochs": 2},
                "resources.micro_batch_size": 2}
    cfg = _config(tmp_path, **settings)
    single = Learner(cfg)
    batch = _random_batch(single.policy.config.vocab_size, group_prompt=group_prompt)
    initial = {k: v.clone() for k, v in single.policy_state().items()}
    prepared, _ = single.prepare(batch)
    single.update(prepared)
    ranks = RayLearner(_config(tmp_path, **settings, **{"resources.learner_workers": 2}))
    prepared_ddp, _ = ranks.prepare(batch)
    ranks.update(prepared_ddp)
    expected, got = single.policy_state(), ranks.policy_state()
    moved = max(float((expected[k] - initial[k]).abs().max()) for k in expected)
    assert moved > 1e-3  # the update did something
    for key in expected:
        assert torch.allclose(expected[key], got[key], atol=2e-5), key
    ranks.close()
