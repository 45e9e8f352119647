"""The RL loop, top to bottom: sample groups -> (filter) -> advantages -> update -> sync -> log.

One loop for PPO, GRPO and DAPO; ``RLConfig`` decides the differences (critic or groups,
clip range, dynamic sampling, loss aggregation, KL). Each step:

1. draw ``prompts_per_step`` tasks from the seeded sampler, ``group_size`` episodes each,
   and run them on the rollout workers (token ids + the engine's logprobs); with a mixture
   (``env.envs``) each group's env is drawn by weight first, then a task of that env from
   the env's own sampler, so a group is always one task of one env;
2. DAPO dynamic sampling: drop groups whose task rewards are all equal and refill the step
   with more groups until it holds ``prompts_per_step`` informative ones, at most
   ``max_sampling_rounds`` extra rounds or ``sampling_time_budget_s`` seconds (logged: groups
   drawn and kept, and the pass rate of each); groups that lost an episode to a crashed
   worker are dropped whole (and counted), never trained on half;
3. shape rewards: the reward's group terms over each complete group, DAPO's overlong term
   among them (``trainers/rl/shaping.py``); collate, ``learner.prepare`` (mismatch, values, KL,
   advantages), ``learner.update`` (every episode of the batch enters the loss:
   ``train/loss_episodes``);
4. push the new weights to the workers, log metrics, checkpoint every ``save_every``.
With ``pipeline: true`` step k+1's rollouts run while step k updates (one step stale;
the importance ratio uses the rollout logprobs, so the update stays correct).
"""

from __future__ import annotations

import dataclasses
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.metrics import solved
from trainers.common import Checkpointer, MetricsLogger
from trainers.common.mixture import choose
from trainers.rl.algorithms import keep_informative_groups
from trainers.rl.batch import collate
from trainers.rl.metrics import episode_stats, plot_reward_curve, weights_nbytes
from trainers.rl.rollout import EpisodeJob
from trainers.rl.shaping import rl_reward, shape_groups
from trainers.rl.warmstart import warm_start

if TYPE_CHECKING:
    from agents.trajectory import Trajectory
    from trainers.rl.config import RLConfig

__all__ = ["CollectedBatch", "TaskSampler", "collect_groups", "evaluate", "load_sampler_states",
           "make_samplers", "per_env_stats", "train"]


@dataclass
class TaskSampler:
    """Walks the task list in a fresh seeded permutation each epoch; its state is the cursor."""

    num_tasks: int
    seed: int
    epoch: int = 0
    position: int = 0
    _order: list[int] = field(default_factory=list, repr=False)

    def _permutation(self) -> list[int]:
        order = list(range(self.num_tasks))
        random.Random(f"{self.seed}:{self.epoch}").shuffle(order)
        return order

    def next(self) -> int:
        if not self._order:
            self._order = self._permutation()
        if self.position >= self.num_tasks:
            self.epoch += 1
            self.position = 0
            self._order = self._permutation()
        index = self._order[self.position]
        self.position += 1
        return index

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation()


@dataclass
class CollectedBatch:
    """The groups to train on, every episode sampled for them, and sampler state after
    (per env name)."""

    groups: list[list[Trajectory]]
    sampled: list[Trajectory]
    stats: dict[str, float]
    sampler_state: dict[str, dict[str, int]]


def make_samplers(config: RLConfig, rollouts: Any) -> list[TaskSampler]:
    """One task sampler per env of the mixture (its training tasks, its own seed)."""
    seed = config.bookkeeping.seed
    return [TaskSampler(rollouts.num_tasks(False, k), seed + k)
            for k in range(len(config.env.mixture))]


def load_sampler_states(config: RLConfig, samplers: list[TaskSampler],
                        state: dict[str, Any]) -> None:
    """Put each env's sampler back (``samplers`` by env name; a checkpoint written before
    mixtures holds one ``sampler``, the single env's)."""
    saved = state.get("samplers") or {config.env.mixture[0].name: state["sampler"]}
    for entry, sampler in zip(config.env.mixture, samplers, strict=True):
        sampler.load_state_dict(saved[entry.name])


def _episode_seed(seed: int, step: int, group: int, sample: int) -> int:
    return random.Random(f"{seed}:{step}:{group}:{sample}").randrange(2**31)


def training_rewards(config: RLConfig) -> list[Any]:
    """Each mixture env's reward plus the algorithm's overlong term (``trainers/rl/shaping.py``),
    in ``config.env.mixture`` order."""
    algo = config.algorithm
    return [rl_reward(entry.id, entry.env_kwargs, config.rollout.max_response_tokens,
                      algo.overlong_buffer, algo.overlong_penalty) for entry in config.env.mixture]


def collect_groups(config: RLConfig, samplers: list[Any], rollouts: Any, step: int,
                   rewards: list[Any] | None = None) -> CollectedBatch:
    """Sample groups until ``prompts_per_step`` usable groups are in hand (or rounds run out);
    each complete group's trajectories carry their shaped reward (the group terms of its env's
    reward in ``rewards``). ``samplers`` holds one task sampler per env of ``config.env.mixture``."""
    rewards = training_rewards(config) if rewards is None else rewards
    algo, seed = config.algorithm, config.bookkeeping.seed
    entries = config.env.mixture
    group_size = algo.group_size
    drawn = [0] * len(entries)
    kept: list[list[Trajectory]] = []
    sampled: list[Trajectory] = []
    totals: dict[str, float] = {}
    drawn_solved: list[float] = []  # per complete group drawn: its share of solved episodes
    kept_solved: list[float] = []
    next_group = 0
    rounds = filtered = incomplete = 0
    started = time.perf_counter()
    out_of_time = False
    while len(kept) < algo.prompts_per_step:
        need = algo.prompts_per_step - len(kept)
        jobs = []
        for _ in range(need):
            env_index = choose(entries, seed, step, next_group)
            task_index = samplers[env_index].next()
            drawn[env_index] += 1
            jobs.extend(EpisodeJob(task_index, next_group, k,
                                   _episode_seed(seed, step, next_group, k), env_index=env_index)
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
        # A group is complete when every sample of it came back; one sample may be several
        # token-exact segments (a gateway session whose template is not append-only).
        complete = [g for g in by_group.values() if len({_episode_key(t) for t in g}) == group_size]
        incomplete += need - len(complete)
        # The env's reward, before the group terms are added: DAPO filters on accuracy, and a
        # group whose answers all scored the same carries no answer signal, whatever the
        # shaping terms (overlong, group length) would add.
        task_rewards = [[float(t.reward) for t in g] for g in complete]
        shares = [_solved_share(g) for g in complete]  # before shaping rewrites the rewards
        drawn_solved.extend(shares)
        for env_index in range(len(entries)):  # each group's terms come from its own env's reward
            mine = [g for g in complete if int(g[0].info.get("env_index", 0)) == env_index]
            if mine:
                shape_groups(mine, rewards[env_index])
        if algo.dynamic_sampling:
            informative = keep_informative_groups(task_rewards)
            filtered += len(complete) - len(informative)
            complete, shares = [complete[i] for i in informative], [shares[i] for i in informative]
        kept.extend(complete)
        kept_solved.extend(shares)
        rounds += 1
        if rounds > algo.max_sampling_rounds:
            break
        budget = algo.sampling_time_budget_s
        if budget and time.perf_counter() - started >= budget and len(kept) < algo.prompts_per_step:
            out_of_time = True  # train on what the step holds rather than stall the run
            break
    kept = kept[:algo.prompts_per_step]
    totals.update({
        "sampling/rounds": float(rounds),
        "sampling/groups_drawn": float(sum(drawn)),
        "sampling/groups_filtered_all_equal": float(filtered),
        "sampling/groups_dropped_incomplete": float(incomplete),
        "sampling/groups_kept": float(len(kept)),
        "sampling/kept_share": len(kept) / max(sum(drawn), 1),
        "sampling/time_budget_hit": float(out_of_time),
        "sampling/time_s": time.perf_counter() - started,
        # The pass rate of the groups the step trains on, beside that of every group drawn:
        # the training batch's reward measures the first, the policy's skill the second.
        "sampling/drawn_pass_rate": _mean_or_zero(drawn_solved),
        "sampling/kept_pass_rate": _mean_or_zero(kept_solved[:algo.prompts_per_step]),
    })
    if len(entries) > 1:  # drawn by weight; kept after dynamic sampling and crashes
        for index, entry in enumerate(entries):
            totals[f"sampling/{entry.name}/groups"] = float(drawn[index])
            totals[f"sampling/{entry.name}/groups_kept"] = float(sum(
                1 for g in kept if int(g[0].info.get("env_index", 0)) == index))
    states = {e.name: sampler.state_dict() for e, sampler in zip(entries, samplers, strict=True)}
    return CollectedBatch(kept, sampled, totals, states)


def _solved_share(group: list[Trajectory]) -> float:
    return sum(1.0 for t in group if solved(t)) / max(len(group), 1)


def _mean_or_zero(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def per_env_stats(config: RLConfig, trajectories: list[Trajectory], prefix: str
                  ) -> dict[str, float]:
    """``<prefix>/<name>/...`` episode statistics of each env of a mixture (none for one env)."""
    entries = config.env.mixture
    if len(entries) < 2:
        return {}
    stats: dict[str, float] = {}
    for index, entry in enumerate(entries):
        mine = [t for t in trajectories if int(t.info.get("env_index", 0)) == index]
        if mine:
            stats.update(episode_stats(mine, prefix=f"{prefix}/{entry.name}"))
    return stats


_EVAL_SEED = 2**31  # training seeds come from _episode_seed (< 2**31); eval seeds sit above


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


def _episode_key(trajectory: Trajectory) -> Any:
    """What one episode's rows share: a gateway session's id (its token-exact segments are
    several trajectories), else the trajectory itself."""
    return (trajectory.info.get("gateway") or {}).get("session_id") or id(trajectory)


def _train_on(config: RLConfig, learner: Any, groups: list[list[Trajectory]], pad_id: int
              ) -> dict[str, float]:
    algo = config.algorithm
    trajectories = [t for g in groups for t in g]
    rewards = [float(t.reward) for t in trajectories]  # shaped in collect_groups
    group_ids = [gi for gi, g in enumerate(groups) for _ in g]
    episodes = {key: n for n, key in enumerate(dict.fromkeys(_episode_key(t) for t in trajectories))}
    episode_ids = [episodes[_episode_key(t)] for t in trajectories]
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


def train(config: RLConfig, stop_after: int | None = None) -> dict[str, float]:
    """Run (or resume) training; returns the last step's metrics.

    ``stop_after`` ends the process-local run after that many steps (tests use it to
    simulate an interrupted run without killing the interpreter).
    """
    import torch

    from trainers.rl.actors import build_groups

    book = config.bookkeeping
    out = Path(book.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    config.save(out / "config.json")
    start_model = warm_start(config)
    if start_model is not None:  # RL starts from the SFT'd policy (and its tokenizer)
        config = dataclasses.replace(config, model=dataclasses.replace(
            config.model, path=str(start_model),
            warm_start=dataclasses.replace(config.model.warm_start, episodes=0)))
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
    rollouts.set_weights(learner.policy_state(), start)
    if book.eval_every and start == 0:
        logger.log(0, evaluate(config, rollouts, heldout_tasks))
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rl-collect")
    last: dict[str, float] = {}
    future: Future | None = None
    pending_weights: tuple[dict[str, Any], int] | None = None
    total = config.algorithm.total_steps
    end = total if stop_after is None else min(total, start + stop_after)
    try:
        for step in range(start + 1, end + 1):
            t_step = time.perf_counter()
            if future is None:
                future = executor.submit(collect_groups, config, samplers, rollouts, step, rewards)
            collected: CollectedBatch = future.result()
            future = None
            rollout_s = time.perf_counter() - t_step
            if pending_weights is not None:
                rollouts.set_weights(*pending_weights)
                pending_weights = None
            if config.rollout.pipeline and step < end:
                future = executor.submit(collect_groups, config, samplers, rollouts, step + 1, rewards)
            metrics = {**episode_stats(collected.sampled), **collected.stats,
                       **per_env_stats(config, collected.sampled, "rollout"),
                       **rollouts.cluster_stats()}
            if collected.groups:
                # Padding ids are never attended to nor trained on; any id works.
                metrics.update(_train_on(config, learner, collected.groups, pad_id=0))
                pending_weights = (learner.policy_state(), step)
                metrics["sync/bytes"] = weights_nbytes(pending_weights[0])
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
            if book.eval_every and (step % book.eval_every == 0 or step == total):
                metrics.update(evaluate(config, rollouts, heldout_tasks))
            logger.log(step, metrics)
            last = metrics
            print(_summary(step, metrics), flush=True)
            if book.save_every and (step % book.save_every == 0 or step == total):
                learner_state = learner.state_dict()
                checkpoints.save(step, lambda d, s=learner_state: torch.save(s, d / "learner.pt"),
                                 {"samplers": collected.sampler_state})
        if end == total:
            learner.save_pretrained(str(out / "final"))
    finally:
        if future is not None:
            future.result()
        executor.shutdown(wait=True)
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


def _summary(step: int, m: dict[str, float]) -> str:
    return (f"[rl] step {step}: reward {m.get('rollout/reward_mean', 0):.3f} "
            f"acc {m.get('rollout/accuracy', 0):.2f} len {m.get('rollout/response_tokens', 0):.0f} "
            f"clip {m.get('policy/clip_frac', 0):.3f} "
            f"mismatch {m.get('mismatch/logprob_abs_diff', 0):.1e} "
            f"kept {m.get('sampling/groups_kept', 0):.0f}/{m.get('sampling/groups_drawn', 0):.0f} "
            f"rollout {m.get('time/rollout_s', 0):.1f}s learner {m.get('time/learner_s', 0):.1f}s")
