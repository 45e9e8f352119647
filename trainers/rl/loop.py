"""The RL loop, top to bottom: sample groups -> (filter) -> advantages -> update -> sync -> log.

One loop for PPO, GRPO and DAPO; ``RLConfig`` decides the differences (critic or groups,
clip range, dynamic sampling, loss aggregation, KL, off-policy correction). Each step:

1. take the step's batch from the batch source: tasks drawn from seeded samplers into
   ``prompts_per_step`` groups of ``group_size`` episodes, played on the rollout workers
   (token ids + the engine's logprobs), shaped and filtered by DAPO's dynamic sampling
   (``trainers/rl/groups.py``); the source is synchronous (``algorithm.max_staleness: 0``:
   the workers play the step, then wait for the update) or streaming (``max_staleness: k``:
   the workers generate continuously, up to k policy versions ahead of the learner,
   ``trainers/rl/streaming.py``);
2. collate, ``learner.prepare`` (recompute the proximal logprobs, off-policy weights,
   mismatch, values, KL, advantages: ``trainers/rl/prepare.py``), ``learner.update``
   (every episode of the batch enters the loss: ``train/loss_episodes``);
3. publish the new weights (synchronous: loaded now; streaming: offered, the workers load
   them between rounds, interrupting turns in flight), log metrics with the rollout-health
   view (``trainers/rl/health.py``; its alarms may stop the run), checkpoint every
   ``save_every``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.common import Checkpointer, ConfigError, MetricsLogger, read_metrics
from trainers.rl.batch import collate
from trainers.rl.groups import (
    CollectedBatch,
    TaskSampler,
    collect_groups,
    episode_key,
    load_sampler_states,
    make_samplers,
    training_rewards,
)
from trainers.rl.health import AlarmMonitor, health_stats
from trainers.rl.metrics import episode_stats, plot_reward_curve, weights_nbytes
from trainers.rl.rollout import EpisodeJob
from trainers.rl.streaming import StreamingCollector

if TYPE_CHECKING:
    from agents.trajectory import Trajectory
    from trainers.rl.config import RLConfig

__all__ = ["CollectedBatch", "TaskSampler", "collect_groups", "evaluate", "load_sampler_states",
           "make_samplers", "per_env_stats", "staleness_stats", "train", "training_rewards"]


def per_env_stats(config: RLConfig, trajectories: list[Trajectory], prefix: str,
                  stats_of: Callable[..., dict[str, float]] = episode_stats) -> dict[str, float]:
    """``<prefix>/<name>/...`` statistics (``stats_of``: episode or health statistics) of
    each env of a mixture (none for one env)."""
    entries = config.env.mixture
    if len(entries) < 2:
        return {}
    stats: dict[str, float] = {}
    for index, entry in enumerate(entries):
        mine = [t for t in trajectories if int(t.info.get("env_index", 0)) == index]
        if mine:
            stats.update(stats_of(mine, prefix=f"{prefix}/{entry.name}"))
    return stats


_EVAL_SEED = 2**31  # training seeds come from groups.episode_seed (< 2**31); eval seeds sit above


def _heldout_metrics(played: list[Trajectory], prefix: str) -> dict[str, float]:
    stats = episode_stats(played, prefix=prefix)
    metrics = {f"{prefix}/heldout_{k[len(prefix) + 1:]}": v for k, v in stats.items()
               if k[len(prefix) + 1:] in ("episodes", "reward_mean", "accuracy", "tool_calls")}
    metrics[f"{prefix}/heldout_tasks"] = float(len({t.task_id for t in played}))
    return metrics


def evaluate(config: RLConfig, rollouts: Any, num_tasks: list[int]) -> dict[str, float]:
    """Score the current policy on the same ``eval_episodes`` episodes of each env's held-out
    tasks (``split: test``, never trained on) every time, cycling over ``num_tasks[env]`` of
    them. A mixture logs each env (``eval/<name>/heldout_*``) and all episodes together."""
    episodes = config.bookkeeping.eval_episodes
    jobs = [EpisodeJob(i % tasks, env * episodes + i, i // tasks, _EVAL_SEED + i, heldout=True,
                       env_index=env)
            for env, tasks in enumerate(num_tasks) for i in range(episodes)]
    trajectories, _ = rollouts.run(jobs)
    played = [t for t in trajectories if t.prompt_ids]
    metrics = _heldout_metrics(played, "eval")
    if len(num_tasks) > 1:
        metrics["eval/heldout_tasks"] = float(len({(t.env_id, t.task_id) for t in played}))
        for env, entry in enumerate(config.env.mixture):
            mine = [t for t in played if int(t.info.get("env_index", 0)) == env]
            metrics.update(_heldout_metrics(mine, f"eval/{entry.name}"))
    return metrics


def _train_on(config: RLConfig, learner: Any, groups: list[list[Trajectory]], pad_id: int
              ) -> dict[str, float]:
    algo = config.algorithm
    trajectories = [t for g in groups for t in g]
    rewards = [float(t.reward) for t in trajectories]  # shaped in collect_groups
    group_ids = [gi for gi, g in enumerate(groups) for _ in g]
    episodes = {key: n for n, key in enumerate(dict.fromkeys(episode_key(t) for t in trajectories))}
    episode_ids = [episodes[episode_key(t)] for t in trajectories]
    batch = collate(trajectories, rewards, group_ids, pad_token_id=pad_id, episode_ids=episode_ids)
    t0 = time.perf_counter()
    prepared, stats = learner.prepare(batch)
    stats.update(learner.update(prepared))
    learner_s = time.perf_counter() - t0
    tokens = float(batch.attention_mask.sum())
    stats.update({
        "train/episodes": float(len(trajectories)),
        "train/shaped_reward_mean": sum(rewards) / len(rewards),
        "time/learner_s": learner_s,
        "perf/learner_tokens_per_s": tokens * algo.ppo_epochs / max(learner_s, 1e-9),
    })
    return stats


class _Synchronous:
    """``max_staleness: 0``: play a step's rounds, then update while the workers wait."""

    def __init__(self, config: RLConfig, samplers: list[Any], rollouts: Any,
                 rewards: list[Any]) -> None:
        self.config, self.samplers, self.rollouts, self.rewards = config, samplers, rollouts, rewards

    def batch(self, step: int) -> CollectedBatch:
        return collect_groups(self.config, self.samplers, self.rollouts, step, self.rewards)

    def publish(self, state: Any, version: int) -> None:
        self.rollouts.set_weights(state, version)

    def run(self, jobs: list[EpisodeJob]) -> tuple[list[Trajectory], dict[str, float]]:
        return self.rollouts.run(jobs)

    def close(self) -> None:
        pass


def train(config: RLConfig, stop_after: int | None = None, *,
          streaming: bool | None = None) -> dict[str, float]:
    """Run (or resume) training; returns the last step's metrics.

    ``stop_after`` ends the process-local run after that many steps (tests use it to
    simulate an interrupted run without killing the interpreter). ``streaming`` forces the
    asynchronous batch source on or off (default: on when ``algorithm.max_staleness > 0``;
    tests run it with ``max_staleness: 0`` against the synchronous loop).
    """
    import torch

    from trainers.rl.actors import build_groups

    book = config.bookkeeping
    out = Path(book.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if config.model.warm_start.episodes:
        raise ConfigError("model.warm_start is a stage before the RL loop: run trainers.rl.train (what "
                          "coa train rl runs), or start from trainers.rl.warmstart.warm_started(config)")
    config.save(out / "config.json")
    random.seed(book.seed)
    torch.manual_seed(book.seed)
    rewards = training_rewards(config)  # a bad reward block fails here, before any worker starts
    rollouts, learner = build_groups(config)
    samplers = make_samplers(config, rollouts)
    heldout_tasks = [rollouts.num_tasks(True, k) for k in range(len(config.env.mixture))] \
        if book.eval_every else []
    checkpoints = Checkpointer(out, keep=book.keep_checkpoints)
    start = 0
    resume_from = checkpoints.resolve(book.resume)
    if resume_from is not None:
        learner.load_state_dict(torch.load(resume_from / "learner.pt", map_location="cpu",
                                           weights_only=False))
        state = checkpoints.read_state(resume_from)
        load_sampler_states(config, samplers, state)
        start = int(state["step"])
        checkpoints.restore_rng(resume_from)
        print(f"[rl] resumed from {resume_from} at step {start}", flush=True)
    logger = MetricsLogger(out, tensorboard=book.tensorboard,
                           resume_step=start if resume_from is not None else None)
    alarms = AlarmMonitor(config.health.alarms, out, history=read_metrics(out / "metrics.jsonl")
                          if resume_from is not None else None)
    rollouts.set_weights(learner.policy_state(), start)
    total = config.algorithm.total_steps
    end = total if stop_after is None else min(total, start + stop_after)
    use_stream = config.algorithm.max_staleness > 0 if streaming is None else streaming
    source: Any = _Synchronous(config, samplers, rollouts, rewards) if not use_stream else \
        StreamingCollector(config, samplers, rollouts, rewards, start, start + 1, end)
    last: dict[str, float] = {}
    try:
        if book.eval_every and start == 0:
            logger.log(0, evaluate(config, source, heldout_tasks))
        for step in range(start + 1, end + 1):
            t_step = time.perf_counter()
            collected: CollectedBatch = source.batch(step)
            waited_s = time.perf_counter() - t_step  # the learner had nothing to do
            metrics = {**episode_stats(collected.sampled), **collected.stats,
                       **per_env_stats(config, collected.sampled, "rollout"),
                       **health_stats(collected.sampled),
                       **per_env_stats(config, collected.sampled, "health", health_stats),
                       **rollouts.cluster_stats()}
            if collected.groups:
                # Padding ids are never attended to nor trained on; any id works.
                metrics.update(_train_on(config, learner, collected.groups, pad_id=0))
                metrics.update(staleness_stats(collected.groups, step))
            else:
                metrics["train/skipped"] = 1.0  # every group was all-equal: nothing to learn
            if collected.groups or use_stream:  # streaming: the version label must advance
                weights = learner.policy_state()
                t_sync = time.perf_counter()
                source.publish(weights, step)
                metrics.update({"sync/bytes": weights_nbytes(weights),
                                "time/sync_s": time.perf_counter() - t_sync})
            step_s = time.perf_counter() - t_step
            gen_s = metrics.get("time/generation_s", 0.0)
            metrics.update({
                "time/rollout_s": waited_s,
                "time/step_s": step_s,
                "perf/learner_idle_share": waited_s / max(step_s, 1e-9),
                "perf/episodes_per_s": len(collected.sampled) / max(step_s, 1e-9),
                "perf/rollout_tokens_per_s":
                    metrics.get("rollout/generated_tokens_total", 0.0) / max(gen_s, 1e-9),
            })
            if book.eval_every and (step % book.eval_every == 0 or step == total):
                metrics.update(evaluate(config, source, heldout_tasks))
            flags, stop = alarms.observe(step, metrics)
            metrics.update(flags)
            logger.log(step, metrics)
            every = book.save_rollouts_every
            if any(flags.values()) or (every and step % every == 0):
                _save_rollouts(out / "rollouts" / f"step-{step}.jsonl", collected.sampled)
            last = metrics
            print(_summary(step, metrics), flush=True)
            if stop or (book.save_every and (step % book.save_every == 0 or step == total)):
                learner_state = learner.state_dict()
                checkpoints.save(step, lambda d, s=learner_state: torch.save(s, d / "learner.pt"),
                                 {"samplers": collected.sampler_state})
            if stop:
                print(f"[rl] stopped by an alarm at step {step}; checkpoint-{step} holds the "
                      f"state (see {out / 'alarms.jsonl'})", flush=True)
                break
        else:
            if end == total:
                learner.save_pretrained(str(out / "final"))
    finally:
        source.close()
        logger.close()
        for reward in rewards:
            reward.close()
        if getattr(learner, "close", None) is not None:  # Ray: free the learner actors
            learner.close()
        rollouts.close()
    if book.plot:
        plot_reward_curve(out / "metrics.jsonl", out / "reward_curve.png",
                          title=f"{config.algorithm.name} on {config.env.label}",
                          envs=[e.name for e in config.env.envs])
    return last


def _save_rollouts(path: Path, trajectories: list[Trajectory]) -> None:
    from agents.trajectory import write_trajectory

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for trajectory in trajectories:
            write_trajectory(handle, trajectory)


def staleness_stats(groups: list[list[Trajectory]], step: int) -> dict[str, float]:
    """Policy versions between each trained episode's start and the update training on it
    (step ``step`` updates version ``step - 1``): 0 in the synchronous loop, at most
    ``max_staleness`` in the asynchronous one."""
    lags = [step - 1 - int(t.info["weights_version"]) for g in groups for t in g
            if t.info.get("weights_version") is not None]
    if not lags:
        return {}
    return {"async/staleness_mean": sum(lags) / len(lags), "async/staleness_max": float(max(lags))}


def _summary(step: int, m: dict[str, float]) -> str:
    return (f"[rl] step {step}: reward {m.get('rollout/reward_mean', 0):.3f} "
            f"acc {m.get('rollout/accuracy', 0):.2f} len {m.get('rollout/response_tokens', 0):.0f} "
            f"clip {m.get('policy/clip_frac', 0):.3f} "
            f"mismatch {m.get('mismatch/logprob_abs_diff', 0):.1e} "
            f"kept {m.get('sampling/groups_kept', 0):.0f}/{m.get('sampling/groups_drawn', 0):.0f} "
            f"rollout {m.get('time/rollout_s', 0):.1f}s learner {m.get('time/learner_s', 0):.1f}s "
            f"stale {m.get('async/staleness_max', 0):.0f}")
