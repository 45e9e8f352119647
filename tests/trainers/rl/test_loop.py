"""The loop end to end on CPU: metrics, checkpoints, PNG, and resuming reproduces the same run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.trainers.rl.tiny_runs import TaskOrder, metric_rows, tiny_run_config  # noqa: E402
from tests.trainers.rl.tiny_runs import final_weights as _weights  # noqa: E402
from trainers.rl.config import RLConfig  # noqa: E402


def _config(out: Path, **overrides) -> RLConfig:
    """The tiny run (tests/trainers/rl/tiny_runs.py), learning curve plotted; ``overrides``
    are dotted keys (``algorithm.name``) or sections."""
    return tiny_run_config(out, {"bookkeeping.plot": True}, **overrides)


def _steps(out: Path) -> list[int]:
    return [row["step"] for row in metric_rows(out)]


def test_train_writes_metrics_checkpoints_and_curve_and_resume_is_exact(tmp_path):
    from trainers.rl.loop import train

    straight = tmp_path / "straight"
    last = train(_config(straight))
    for key in ("rollout/reward_mean", "rollout/accuracy", "rollout/tool_calls",
                "policy/entropy", "policy/clip_frac", "adv/std", "time/generation_s",
                "time/learner_s", "perf/rollout_tokens_per_s", "mismatch/logprob_abs_diff"):
        assert key in last, key
    assert last["mismatch/logprob_abs_diff"] < 1e-3  # engine and learner agree
    assert _steps(straight) == [0, 1, 2, 3, 4]  # step 0: the eval before any update
    evals = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()
             if "eval/heldout_reward_mean" in line]
    # 16 tasks: 13 to train on, 3 held out (SynthHop holds out every fifth)
    assert [e["step"] for e in evals] == [0, 2, 4]
    assert all(e["eval/heldout_episodes"] == 4 and e["eval/heldout_tasks"] == 3 for e in evals)
    assert (straight / "reward_curve.png").stat().st_size > 1000
    assert sorted(p.name for p in straight.glob("checkpoint-*")) == [
        "checkpoint-2", "checkpoint-4"]

    interrupted = tmp_path / "interrupted"
    train(_config(interrupted), stop_after=2)
    assert not (interrupted / "final").exists()
    train(_config(interrupted, **{"bookkeeping.resume": "latest"}))
    assert _steps(interrupted) == [0, 1, 2, 3, 4]
    a, b = _weights(straight / "final"), _weights(interrupted / "final")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


STEPS_KILLED = 200


@pytest.mark.slow
def test_cli_resumes_after_kill_9(tmp_path):
    """``coa train rl`` killed with SIGKILL mid-run continues from its last checkpoint."""
    config = tmp_path / "rl.yaml"
    # long enough that the kill lands mid-run on a quiet machine too (8 steps took ~3 s there:
    # the run had finished, and rotated checkpoint-2 away, before it was looked for); the
    # kill comes at the first complete checkpoint, whichever step it is
    cfg = _config(tmp_path / "run", **{"algorithm.total_steps": STEPS_KILLED}).to_dict()
    import yaml

    config.write_text(yaml.safe_dump(cfg))
    command = [sys.executable, "-m", "coa_cli.main", "train", "rl", "--config", str(config)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = tmp_path / "run"
    deadline = time.monotonic() + 240
    while not any(run.glob("checkpoint-*/COMPLETE")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is not None:
        assert proc.returncode == 0, "the run failed before it could be killed"
        pytest.skip("the run finished before it could be killed (machine too fast)")
    assert any(run.glob("checkpoint-*/COMPLETE")), "no checkpoint was written"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from" in done.stdout
    assert _steps(tmp_path / "run") == list(range(0, STEPS_KILLED + 1))
    assert (tmp_path / "run" / "final").is_dir()


def test_one_step_stale_ppo_with_a_separate_critic(tmp_path):
    """Rollouts of step k+1 overlap the update of step k (``max_staleness: 1``, what
    ``rollout.pipeline`` was); PPO's critic is its own model."""
    from trainers.rl.loop import train

    out = tmp_path / "ppo"
    last = train(_config(out, **{
        "algorithm": {"name": "ppo", "critic": "separate", "group_size": 1,
                      "prompts_per_step": 4, "total_steps": 3, "entropy_coef": 0.0,
                      "max_staleness": 1},
        "bookkeeping.eval_every": 0, "bookkeeping.plot": False}))
    assert _steps(out) == [1, 2, 3]
    for key in ("critic/value_mean", "critic/return_mean", "loss/value", "critic/vf_clip_frac"):
        assert key in last, key
    # one step off-policy: the ratio still uses the rollout engine's logprobs, and the
    # learner's recompute differs from them by at most one update
    assert last["mismatch/logprob_abs_diff"] > 0
    assert (out / "final").is_dir()


def test_an_env_that_crashes_drops_its_whole_group_and_counts_it(tmp_path, monkeypatch):
    """Episodes whose env raises are never trained on, and their group is not half-used."""
    import gymnasium as gym

    from trainers.rl import rollout as rollout_mod
    from trainers.rl.actors import LocalRollouts
    from trainers.rl.loop import collect_groups

    make = rollout_mod.make_env

    class Crashing(gym.Wrapper):
        def step(self, action):
            if self.env.unwrapped.task.task_id == self.env.unwrapped.tasks[0].task_id:
                raise RuntimeError("tool backend died")
            return self.env.step(action)

    monkeypatch.setattr(rollout_mod, "make_env", lambda config, heldout=False, env_index=0:
                        Crashing(make(config, heldout, env_index)))

    cfg = _config(tmp_path, **{"algorithm.max_sampling_rounds": 0})
    rollouts = LocalRollouts(cfg)
    try:
        batch = collect_groups(cfg, [TaskOrder(0, 1)], rollouts, step=1)
    finally:
        rollouts.close()
    assert len(batch.groups) == 1
    assert {t.info["task_index"] for t in batch.groups[0]} == {1}
    assert batch.stats["sampling/groups_dropped_incomplete"] == 1
    assert batch.stats["errors/env"] == 2  # both samples of task 0 (status error:env), counted


def test_dynamic_sampling_filters_on_the_task_reward_not_the_length_shaping(tmp_path):
    """DAPO drops groups whose answers all scored the same; one overlong episode in such a
    group changes its shaped rewards but gives no answer signal, so it is still dropped."""
    from agents.trajectory import Trajectory
    from trainers.rl.loop import collect_groups

    def episode(job, reward, tokens):
        t = Trajectory(env_id="t", task_id=str(job.task_index), prompt_ids=[1], reward=reward,
                       info={"group_id": job.group_id, "task_index": job.task_index})
        t.add_generated("x", [2] * tokens, [0.0] * tokens)
        return t

    class Rollouts:  # task 0: both wrong, one of them overlong; task 1: one right
        def run(self, jobs, purpose="train"):
            made = [episode(j, 0.0, 40 if j.sample_index else 4) if j.task_index == 0
                    else episode(j, float(j.sample_index), 4) for j in jobs]
            return made, {}

    cfg = _config(tmp_path, **{"algorithm": {"max_sampling_rounds": 0, "dynamic_sampling": True,
                                             "overlong_buffer": 16},
                               "rollout.max_response_tokens": 48})
    batch = collect_groups(cfg, [TaskOrder(0, 1)], Rollouts(), step=1)
    assert [{t.info["task_index"] for t in g} for g in batch.groups] == [{1}]
    assert batch.stats["sampling/groups_filtered_all_equal"] == 1


def test_a_sample_that_came_back_as_several_segments_completes_its_group(tmp_path):
    """An external agent's session may be several token-exact segments (one sample, several
    trajectories): the group is complete when every sample is back, and the segments of one
    sample share its advantage in the update (episode_ids in the batch)."""
    from agents.trajectory import Trajectory
    from trainers.rl.batch import collate
    from trainers.rl.loop import collect_groups

    def segment(job, reward, number):
        t = Trajectory(env_id="t", task_id=str(job.task_index), prompt_ids=[1, number], reward=reward,
                       sample_index=job.sample_index,
                       info={"group_id": job.group_id, "task_index": job.task_index,
                             "gateway": {"session_id": f"s{job.group_id}-{job.sample_index}"}})
        t.add_generated("x", [2, 3], [0.0, 0.0])
        return t

    class Rollouts:  # sample 0 of every group comes back as two segments
        def run(self, jobs):
            made = []
            for job in jobs:
                reward = float(job.sample_index == 0)
                made += [segment(job, reward, n) for n in range(2 if job.sample_index == 0 else 1)]
            return made, {}

    class Tasks:
        def next(self):
            return 0

        def state_dict(self):
            return {}

    cfg = _config(tmp_path, **{"algorithm": {"max_sampling_rounds": 0, "dynamic_sampling": True}})
    batch = collect_groups(cfg, [Tasks()], Rollouts(), step=1)
    assert len(batch.groups) == cfg.algorithm.prompts_per_step
    group = batch.groups[0]
    assert len(group) == cfg.algorithm.group_size + 1
    assert batch.stats["sampling/groups_dropped_incomplete"] == 0
    assert [t.sample_index for t in group].count(0) == 2
    episodes = [t.sample_index for t in group]
    tensors = collate(group, [t.reward for t in group], [0] * len(group), episode_ids=episodes)
    assert tensors.episode_ids.tolist() == episodes


@pytest.mark.parametrize("overlap", [True, False])
def test_rollout_worker_runs_more_jobs_than_envs_in_order(tmp_path, overlap):
    """Jobs beyond episodes_in_flight wait for a free env, in both step modes; each
    finished episode's cached keys/values are released (the hf engine keeps none)."""
    from trainers.rl.rollout import EpisodeJob, RolloutWorker

    worker = RolloutWorker(_config(tmp_path, **{"rollout.episodes_in_flight": 2}),
                           overlap_tools=overlap)
    try:
        jobs = [EpisodeJob(i % 3, i, 0, 50 + i) for i in range(5)]
        result = worker.run(jobs)
    finally:
        worker.close()
    assert [t.info["group_id"] for t in result.trajectories] == [0, 1, 2, 3, 4]
    assert all(t.prompt_ids and t.segments for t in result.trajectories)
    store = worker.engine.prefix_cache
    assert [e for e in store._entries.values() if not e.shared] == []


def test_rl_trains_on_training_tasks_and_evaluates_on_held_out_ones(tmp_path):
    from trainers.rl.config import ConfigError
    from trainers.rl.rollout import make_env

    cfg = _config(tmp_path, **{"env.eval_kwargs": {"task_options": {"num_tasks": 11}}})
    train_env, eval_env = make_env(cfg), make_env(cfg, heldout=True)
    try:
        train_ids = {t.task_id for t in train_env.unwrapped.tasks}
        eval_ids = {t.task_id for t in eval_env.unwrapped.tasks}
        assert train_ids and eval_ids and not train_ids & eval_ids
        # env.eval_kwargs reaches the held-out env only (11 tasks: 2 held out, vs 3 of 16)
        assert len(eval_ids) == 2 and len(train_ids) == 13
    finally:
        train_env.close()
        eval_env.close()
    everything = {"env.kwargs.task_options.split": "all"}
    with pytest.raises(ConfigError, match="must not be trained on"):
        _config(tmp_path, **everything)
    assert _config(tmp_path, **everything, **{"bookkeeping.eval_every": 0}).env.train_split == "all"


def test_episodes_without_a_verdict_leave_the_loss_and_are_counted(tmp_path):
    """A judge that was down gives no verdict (``error:reward``): that episode is not trained
    on (counted); its group trains on the others while two remain."""
    from agents.trajectory import EpisodeStatus, Trajectory
    from trainers.rl.loop import collect_groups

    def episode(job, reward, unscored):
        t = Trajectory(env_id="t", task_id=str(job.task_index), prompt_ids=[1], reward=reward,
                       info={"group_id": job.group_id, "task_index": job.task_index})
        if unscored:
            t.status = EpisodeStatus.ERROR_REWARD
            t.info["reward_error"] = "judge: connection refused"
        t.add_generated("x", [2] * 4, [0.0] * 4)
        return t

    class Rollouts:  # task 0: one of three unjudged; task 1: two of three unjudged
        def run(self, jobs):
            made = [episode(j, float(j.sample_index == 1),
                            j.sample_index == 2 or (j.task_index == 1 and j.sample_index == 1))
                    for j in jobs]
            return made, {}

    cfg = _config(tmp_path, **{"algorithm": {"max_sampling_rounds": 0, "group_size": 3,
                                             "minibatch_size": 6}})
    batch = collect_groups(cfg, [TaskOrder(0, 1)], Rollouts(), step=1)
    assert [[t.info["task_index"] for t in g] for g in batch.groups] == [[0, 0]]
    assert not any(t.status is EpisodeStatus.ERROR_REWARD for g in batch.groups for t in g)
    assert batch.stats["sampling/episodes_dropped_unscored"] == 3
    assert batch.stats["sampling/groups_dropped_incomplete"] == 0  # every episode came back
