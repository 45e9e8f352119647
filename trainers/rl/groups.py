"""One RL step's batch: tasks drawn into groups, played, shaped and filtered.

Each step draws ``prompts_per_step`` tasks from seeded samplers (one per env of a mixture;
each group's env is drawn by weight first), ``group_size`` episodes each. DAPO dynamic
sampling drops groups whose task rewards are all equal and refills the step with more groups
until it holds ``prompts_per_step`` informative ones, at most ``max_sampling_rounds`` extra
rounds or ``sampling_time_budget_s`` seconds. A group that lost an episode (a crashed worker,
a broken env) is dropped whole and counted, never trained on half. An episode whose answer
got no verdict (``error:reward``: a judge that was down) is left out of the loss and counted;
its group trains on the others (if two remain; PPO's groups of one drop).
With asynchronous rollouts, an episode that started more than ``max_staleness`` policy
versions before the update that would train on it is dropped (counted; the workers' start
rule keeps this from happening, so a count above 0 is a bug).

:class:`StepGroups` holds one step's rounds; :func:`collect_groups` plays them one after the
other on the rollout workers (the synchronous loop), the streaming collector
(``trainers/rl/streaming.py``) interleaves several steps' rounds on busy workers.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.metrics import solved
from trainers.common.mixture import choose
from trainers.rl.algorithms import keep_informative_groups
from trainers.rl.rollout import EpisodeJob
from trainers.rl.shaping import rl_reward, shape_groups

if TYPE_CHECKING:
    from agents.trajectory import Trajectory
    from trainers.rl.config import RLConfig

__all__ = ["CollectedBatch", "StepGroups", "TaskSampler", "collect_groups", "episode_key",
           "load_sampler_states", "make_samplers", "training_rewards"]


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


def episode_seed(seed: int, step: int, group: int, sample: int) -> int:
    return random.Random(f"{seed}:{step}:{group}:{sample}").randrange(2**31)


def training_rewards(config: RLConfig) -> list[Any]:
    """Each mixture env's reward plus the algorithm's overlong term (``trainers/rl/shaping.py``),
    in ``config.env.mixture`` order."""
    algo = config.algorithm
    return [rl_reward(entry.id, entry.env_kwargs, config.rollout.max_response_tokens,
                      algo.overlong_buffer, algo.overlong_penalty) for entry in config.env.mixture]


def episode_key(trajectory: Trajectory) -> Any:
    """What one episode's rows share: a gateway session's id (its token-exact segments are
    several trajectories), else the trajectory itself."""
    return (trajectory.info.get("gateway") or {}).get("session_id") or id(trajectory)


def _unscored(trajectory: Trajectory) -> bool:
    """The answer got no verdict (``error:reward``: the primary reward term raised, e.g. a
    judge that was down): neither right nor wrong, so it trains nothing."""
    from agents.trajectory import EpisodeStatus

    return trajectory.status is EpisodeStatus.ERROR_REWARD


def _solved_share(group: list[Trajectory]) -> float:
    return sum(1.0 for t in group if solved(t)) / max(len(group), 1)


def _mean_or_zero(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


class StepGroups:
    """The groups of RL step ``step``: :meth:`next_round` draws jobs (None once the step is
    full, or its rounds or time are spent), :meth:`add_round` takes the round's episodes
    back, :meth:`result` is the batch. ``min_version`` (streaming) goes onto every job: the
oldest policy version its episodes may start under."""

    def __init__(self, config: RLConfig, samplers: list[Any], step: int, rewards: list[Any],
                 min_version: int | None = None) -> None:
        self.config, self.samplers, self.step, self.rewards = config, samplers, step, rewards
        self.min_version = min_version
        self.drawn = [0] * len(config.env.mixture)
        self.kept: list[list[Trajectory]] = []
        self.sampled: list[Trajectory] = []
        self.totals: dict[str, float] = {}
        self.drawn_solved: list[float] = []  # per complete group drawn: its share solved
        self.kept_solved: list[float] = []
        self.next_group = 0
        self.rounds = self.filtered = self.incomplete = 0
        self.unscored = self.stale = 0
        self.need = 0
        self.started = time.perf_counter()
        self.out_of_time = self.done = False

    def next_round(self) -> list[EpisodeJob] | None:
        algo, seed = self.config.algorithm, self.config.bookkeeping.seed
        if self.done or len(self.kept) >= algo.prompts_per_step:
            self.done = True
            return None
        self.need = algo.prompts_per_step - len(self.kept)
        jobs = []
        for _ in range(self.need):
            env_index = choose(self.config.env.mixture, seed, self.step, self.next_group)
            task_index = self.samplers[env_index].next()
            self.drawn[env_index] += 1
            jobs.extend(EpisodeJob(task_index, self.next_group, k,
                                   episode_seed(seed, self.step, self.next_group, k),
                                   env_index=env_index, step=self.step,
                                   min_version=-1 if self.min_version is None
                                   else self.min_version)
                        for k in range(algo.group_size))
            self.next_group += 1
        return jobs

    def add_round(self, trajectories: list[Trajectory], stats: dict[str, float]) -> None:
        algo = self.config.algorithm
        for key, value in stats.items():
            self.totals[key] = self.totals.get(key, 0.0) + value
        by_group: dict[int, list[Trajectory]] = {}
        for trajectory in trajectories:
            failed = trajectory.status.is_error and not _unscored(trajectory)
            if failed or not trajectory.prompt_ids or self._too_stale(trajectory):
                continue  # never trained on; counted in errors/* and below
            by_group.setdefault(int(trajectory.info["group_id"]), []).append(trajectory)
        self.sampled.extend(t for t in trajectories if t.prompt_ids)
        # A group is complete when every sample of it came back; one sample may be several
        # token-exact segments (a gateway session whose template is not append-only).
        complete = [g for g in by_group.values()
                    if len({episode_key(t) for t in g}) == algo.group_size]
        self.incomplete += self.need - len(complete)
        complete = self._without_unscored(complete)
        # The env's reward, before the group terms are added: DAPO filters on accuracy, and a
        # group whose answers all scored the same carries no answer signal, whatever the
        # shaping terms (overlong, group length) would add.
        task_rewards = [[float(t.reward) for t in g] for g in complete]
        shares = [_solved_share(g) for g in complete]  # before shaping rewrites the rewards
        self.drawn_solved.extend(shares)
        for env_index in range(len(self.config.env.mixture)):  # each group's own env's terms
            mine = [g for g in complete if int(g[0].info.get("env_index", 0)) == env_index]
            if mine:
                shape_groups(mine, self.rewards[env_index])
        if algo.dynamic_sampling:
            informative = keep_informative_groups(task_rewards)
            self.filtered += len(complete) - len(informative)
            complete, shares = [complete[i] for i in informative], [shares[i] for i in informative]
        self.kept.extend(complete)
        self.kept_solved.extend(shares)
        self.rounds += 1
        budget = algo.sampling_time_budget_s
        if self.rounds > algo.max_sampling_rounds:
            self.done = True
        elif (budget and time.perf_counter() - self.started >= budget
              and len(self.kept) < algo.prompts_per_step):
            self.out_of_time = self.done = True  # train on what the step holds, not stall

    def _too_stale(self, trajectory: Trajectory) -> bool:
        started = trajectory.info.get("weights_version")
        if self.min_version is None or started is None or int(started) >= self.min_version:
            return False
        self.stale += 1
        return True

    def _without_unscored(self, groups: list[list[Trajectory]]) -> list[list[Trajectory]]:
        """Episodes whose answer got no verdict leave the loss (counted); a group keeps the
        others while at least two remain (PPO: its one episode)."""
        kept = []
        for group in groups:
            fine = [t for t in group if not _unscored(t)]
            self.unscored += len(group) - len(fine)
            if len(fine) == len(group) or len(fine) >= min(2, self.config.algorithm.group_size):
                kept.append(fine)
        return kept

    def result(self) -> CollectedBatch:
        algo, entries = self.config.algorithm, self.config.env.mixture
        kept = self.kept[:algo.prompts_per_step]
        totals = dict(self.totals)
        totals.update({
            "sampling/rounds": float(self.rounds),
            "sampling/groups_drawn": float(sum(self.drawn)),
            "sampling/groups_filtered_all_equal": float(self.filtered),
            "sampling/groups_dropped_incomplete": float(self.incomplete),
            "sampling/groups_kept": float(len(kept)),
            "sampling/kept_share": len(kept) / max(sum(self.drawn), 1),
            "sampling/time_budget_hit": float(self.out_of_time),
            "sampling/time_s": time.perf_counter() - self.started,
            "sampling/episodes_dropped_unscored": float(self.unscored),
            # The pass rate of the groups the step trains on, beside that of every group drawn:
            # the training batch's reward measures the first, the policy's skill the second.
            "sampling/drawn_pass_rate": _mean_or_zero(self.drawn_solved),
            "sampling/kept_pass_rate": _mean_or_zero(self.kept_solved[:algo.prompts_per_step]),
        })
        if self.min_version is not None:  # streaming
            totals["async/dropped_stale_episodes"] = float(self.stale)
        if len(entries) > 1:  # drawn by weight; kept after dynamic sampling and crashes
            for index, entry in enumerate(entries):
                totals[f"sampling/{entry.name}/groups"] = float(self.drawn[index])
                totals[f"sampling/{entry.name}/groups_kept"] = float(sum(
                    1 for g in kept if int(g[0].info.get("env_index", 0)) == index))
        states = {e.name: s.state_dict() for e, s in zip(entries, self.samplers, strict=True)}
        return CollectedBatch(kept, self.sampled, totals, states)


def collect_groups(config: RLConfig, samplers: list[Any], rollouts: Any, step: int,
                   rewards: list[Any] | None = None) -> CollectedBatch:
    """Play step ``step``'s rounds one after another on ``rollouts`` until it holds
    ``prompts_per_step`` usable groups (or its rounds or time run out); each kept group's
    trajectories carry their shaped reward. ``samplers``: one per env of the mixture."""
    groups = StepGroups(config, samplers, step,
                        training_rewards(config) if rewards is None else rewards)
    while (jobs := groups.next_round()) is not None:
        trajectories, stats = rollouts.run(jobs)
        groups.add_round(trajectories, stats)
    return groups.result()
