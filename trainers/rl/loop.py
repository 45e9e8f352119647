"""The RL loop, top to bottom: sample groups -> (filter) -> advantages -> update -> sync -> log.

One loop for PPO, GRPO and DAPO; ``RLConfig`` decides the differences (critic or groups,
clip range, dynamic sampling, loss aggregation, KL). Each step:

1. draw ``prompts_per_step`` tasks from the seeded sampler, ``group_size`` episodes each,
   and run them on the rollout workers (token ids + the engine's logprobs);
2. DAPO dynamic sampling: drop groups whose rewards are all equal and sample more groups,
   at most ``max_sampling_rounds`` extra rounds, until the batch is full; groups that lost
   an episode to a crashed worker are dropped whole (and counted), never trained on half;
3. shape rewards (overlong penalty), collate, ``learner.prepare`` (mismatch, values, KL,
   advantages), ``learner.update``;
4. push the new weights to the workers, log metrics, checkpoint every ``save_every``.
With ``pipeline: true`` step k+1's rollouts run while step k updates (one step stale;
the importance ratio uses the rollout logprobs, so the update stays correct).
"""

from __future__ import annotations

import dataclasses
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.rl.algorithms import keep_informative_groups
from trainers.rl.batch import collate, shaped_rewards
from trainers.rl.checkpoint import TaskSampler, latest_checkpoint, load_checkpoint, save_checkpoint
from trainers.rl.metrics import MetricsLogger, episode_stats, plot_reward_curve
from trainers.rl.rollout import EpisodeJob, training_split
from trainers.rl.warmstart import warm_start

if TYPE_CHECKING:
    from agents.trajectory import Trajectory
    from trainers.rl.config import RLConfig

__all__ = ["CollectedBatch", "collect_groups", "evaluate", "train"]


@dataclass
class CollectedBatch:
    """The groups to train on, every episode sampled for them, and sampler state after."""

    groups: list[list[Trajectory]]
    sampled: list[Trajectory]
    stats: dict[str, float]
    sampler_state: dict[str, int]


def _episode_seed(seed: int, step: int, group: int, sample: int) -> int:
    return random.Random(f"{seed}:{step}:{group}:{sample}").randrange(2**31)


def collect_groups(config: RLConfig, sampler: TaskSampler, rollouts: Any, step: int
                   ) -> CollectedBatch:
    """Sample groups until ``prompts_per_step`` usable groups are in hand (or rounds run out)."""
    group_size = int(config.group_size or 1)
    kept: list[list[Trajectory]] = []
    sampled: list[Trajectory] = []
    totals: dict[str, float] = {}
    next_group = 0
    rounds = filtered = incomplete = 0
    while len(kept) < config.prompts_per_step:
        need = config.prompts_per_step - len(kept)
        jobs = []
        for _ in range(need):
            task_index = sampler.next()
            jobs.extend(EpisodeJob(task_index, next_group, k,
                                   _episode_seed(config.seed, step, next_group, k))
                        for k in range(group_size))
            next_group += 1
        trajectories, stats = rollouts.run(jobs)
        for key, value in stats.items():
            totals[key] = totals.get(key, 0.0) + value
        by_group: dict[int, list[Trajectory]] = {}
        for trajectory in trajectories:
            if trajectory.status.is_error or not trajectory.prompt_ids:
                continue  # never trained on; counted in errors/* and below
            by_group.setdefault(int(trajectory.info["group_id"]), []).append(trajectory)
        sampled.extend(t for t in trajectories if t.prompt_ids)
        complete = [g for g in by_group.values() if len(g) == group_size]
        incomplete += need - len(complete)
        if config.dynamic_sampling:
            rewards = [shaped_rewards(g, config.max_response_tokens, config.overlong_buffer or 0,
                                      config.overlong_penalty) for g in complete]
            informative = [complete[i] for i in keep_informative_groups(rewards)]
            filtered += len(complete) - len(informative)
            complete = informative
        kept.extend(complete)
        rounds += 1
        if rounds > config.max_sampling_rounds:
            break
    totals.update({
        "sampling/rounds": float(rounds),
        "sampling/groups_filtered_all_equal": float(filtered),
        "sampling/groups_dropped_incomplete": float(incomplete),
        "sampling/groups_kept": float(min(len(kept), config.prompts_per_step)),
    })
    return CollectedBatch(kept[:config.prompts_per_step], sampled, totals, sampler.state_dict())


_EVAL_SEED = 2**31  # training seeds come from _episode_seed (< 2**31); eval seeds sit above


def evaluate(config: RLConfig, rollouts: Any, num_tasks: int) -> dict[str, float]:
    """Score the current policy on the same ``eval_episodes`` episodes of the env's held-out
    tasks (``split: test``, never trained on) every time, cycling over ``num_tasks`` of them."""
    jobs = [EpisodeJob(i % num_tasks, i, i // num_tasks, _EVAL_SEED + i, heldout=True)
            for i in range(config.eval_episodes)]
    trajectories, _ = rollouts.run(jobs)
    played = [t for t in trajectories if t.prompt_ids]
    stats = episode_stats(played, prefix="eval")
    metrics = {k.replace("eval/", "eval/heldout_"): v for k, v in stats.items()
               if k in ("eval/episodes", "eval/reward_mean", "eval/accuracy", "eval/tool_calls")}
    metrics["eval/heldout_tasks"] = float(len({t.task_id for t in played}))
    return metrics


def _train_on(config: RLConfig, learner: Any, groups: list[list[Trajectory]], pad_id: int
              ) -> dict[str, float]:
    trajectories = [t for g in groups for t in g]
    rewards = shaped_rewards(trajectories, config.max_response_tokens,
                             config.overlong_buffer or 0, config.overlong_penalty)
    group_ids = [gi for gi, g in enumerate(groups) for _ in g]
    batch = collate(trajectories, rewards, group_ids, pad_token_id=pad_id)
    # Minibatch sizes refer to the full batch; a short (filtered) batch trains in one go.
    t0 = time.perf_counter()
    prepared, stats = learner.prepare(batch)
    stats.update(learner.update(prepared))
    learner_s = time.perf_counter() - t0
    tokens = float(batch.attention_mask.sum())
    stats.update({
        "train/episodes": float(len(trajectories)),
        "train/shaped_reward_mean": sum(rewards) / len(rewards),
        "time/learner_s": learner_s,
        "perf/learner_tokens_per_s": tokens * config.ppo_epochs / max(learner_s, 1e-9),
    })
    return stats


def train(config: RLConfig, stop_after: int | None = None) -> dict[str, float]:
    """Run (or resume) training; returns the last step's metrics.

    ``stop_after`` ends the process-local run after that many steps (tests use it to
    simulate an interrupted run without killing the interpreter).
    """
    import torch

    from trainers.rl.actors import build_groups

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    config.save(out / "config.json")
    start_model = warm_start(config)
    if start_model is not None:  # RL starts from the SFT'd policy (and its tokenizer)
        config = dataclasses.replace(config, model=str(start_model))
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    training_split(config)  # refuses an eval that would score trained-on tasks, before any work
    rollouts, learner = build_groups(config)
    sampler = TaskSampler(rollouts.num_tasks(), config.seed)
    heldout_tasks = rollouts.num_tasks(heldout=True) if config.eval_every else 0
    start = 0
    ckpt_root = out / "checkpoints"
    resume_from = latest_checkpoint(ckpt_root) if config.resume else None
    if resume_from is not None:
        learner_state, trainer_state = load_checkpoint(resume_from)
        learner.load_state_dict(learner_state)
        sampler.load_state_dict(trainer_state["sampler"])
        start = int(trainer_state["step"])
        print(f"[rl] resumed from {resume_from} at step {start}", flush=True)
    logger = MetricsLogger(out, config.tensorboard, resume_step=start if config.resume else None)
    rollouts.set_weights(learner.policy_state(), start)
    if config.eval_every and start == 0:
        logger.log(0, evaluate(config, rollouts, heldout_tasks))
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rl-collect")
    last: dict[str, float] = {}
    future: Future | None = None
    pending_weights: tuple[dict[str, Any], int] | None = None
    end = config.total_steps if stop_after is None else min(config.total_steps, start + stop_after)
    try:
        for step in range(start + 1, end + 1):
            t_step = time.perf_counter()
            if future is None:
                future = executor.submit(collect_groups, config, sampler, rollouts, step)
            collected: CollectedBatch = future.result()
            future = None
            rollout_s = time.perf_counter() - t_step
            if pending_weights is not None:
                rollouts.set_weights(*pending_weights)
                pending_weights = None
            if config.pipeline and step < end:
                future = executor.submit(collect_groups, config, sampler, rollouts, step + 1)
            metrics = {**episode_stats(collected.sampled), **collected.stats}
            if collected.groups:
                # Padding ids are never attended to nor trained on; any id works.
                metrics.update(_train_on(config, learner, collected.groups, pad_id=0))
                pending_weights = (learner.policy_state(), step)
                if future is None:  # synchronous: the next rollouts use these weights
                    rollouts.set_weights(*pending_weights)
                    pending_weights = None
            else:
                metrics["train/skipped"] = 1.0  # every group was all-equal: nothing to learn
            gen_s = metrics.get("time/generation_s", 0.0)
            metrics.update({
                "time/rollout_s": rollout_s,
                "time/step_s": time.perf_counter() - t_step,
                "perf/rollout_tokens_per_s":
                    metrics.get("rollout/generated_tokens_total", 0.0) / max(gen_s, 1e-9),
            })
            if config.eval_every and (step % config.eval_every == 0 or step == config.total_steps):
                metrics.update(evaluate(config, rollouts, heldout_tasks))
            logger.log(step, metrics)
            last = metrics
            print(_summary(step, metrics), flush=True)
            if step % config.save_every == 0 or step == config.total_steps:
                save_checkpoint(ckpt_root, step, learner.state_dict(),
                                {"sampler": collected.sampler_state}, keep=config.keep_checkpoints)
        if end == config.total_steps:
            learner.save_pretrained(str(out / "final"))
    finally:
        if future is not None:
            future.result()
        executor.shutdown(wait=True)
        logger.close()
        if getattr(learner, "close", None) is not None:  # Ray: free the learner actors
            learner.close()
        rollouts.close()
    if config.plot:
        plot_reward_curve(out / "metrics.jsonl", out / "reward_curve.png",
                          title=f"{config.algorithm} on {config.env_id}")
    return last


def _summary(step: int, m: dict[str, float]) -> str:
    return (f"[rl] step {step}: reward {m.get('rollout/reward_mean', 0):.3f} "
            f"acc {m.get('rollout/accuracy', 0):.2f} len {m.get('rollout/response_tokens', 0):.0f} "
            f"clip {m.get('policy/clip_frac', 0):.3f} "
            f"mismatch {m.get('mismatch/logprob_abs_diff', 0):.1e} kept {m.get('sampling/groups_kept', 0):.0f} "
            f"rollout {m.get('time/rollout_s', 0):.1f}s learner {m.get('time/learner_s', 0):.1f}s")
