"""Asynchronous RL's batch source: rollout workers generate continuously, steps run ahead.

The synchronous loop plays a step's rounds, then the learner updates while the workers
idle. Here a collector thread keeps the workers fed: every step whose episodes may start
under the weights the workers serve is *admitted* (its first round of groups is submitted
at once) and its later rounds follow as soon as a round is back, so while the learner
trains step s, steps s+1 ... s+k are already being played. The learner takes each step's
kept groups (:meth:`StreamingCollector.batch`) in order.

Bounded staleness (``algorithm.max_staleness`` = k): the update of step s trains the policy
of version s-1, so an episode of step s may start under version s-1-k at the oldest. Step s
is admitted once version s-1-k is published, and every job carries ``min_version = s-1-k``:
a worker starts it only while serving that version or a newer one (weights and jobs travel
separately; the rule holds whichever arrives first). Staleness is counted per episode from
the version it started under (``async/staleness_*``); an episode past the bound is dropped
by :class:`~trainers.rl.groups.StepGroups` (counted: never, by construction).

New weights reach the workers without stopping them (``RolloutWorker.offer_weights``): each
loads them before its next generation round, interrupting the round in flight when
``rollout.interrupt_generation`` is on (its turns resume under the new weights: partial
rollouts, every token keeping its version and logprob). The periodic eval goes through the
same stream (:meth:`StreamingCollector.run`), at the version just published.

A step is also admitted at most k steps ahead of the step the learner last asked for, so
with k = 0 this collector admits step s only once the learner, done with step s-1 (update,
eval, checkpoint), asks for it, and plays it one round at a time: the synchronous loop's
schedule (tested to give the same run).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from trainers.rl.groups import CollectedBatch, StepGroups

if TYPE_CHECKING:
    from agents.trajectory import Trajectory
    from trainers.rl.config import RLConfig
    from trainers.rl.rollout import EpisodeJob

__all__ = ["StreamingCollector"]


class _Waiter:
    """Episodes of one :meth:`StreamingCollector.run` call coming back."""

    def __init__(self, count: int) -> None:
        self.results: dict[int, Trajectory | None] = {}
        self.count = count


class StreamingCollector:
    """Feeds ``rollouts`` (streaming) with the groups of steps ``first_step`` .. ``last_step``
    up to ``max_staleness`` versions ahead of the published weights."""

    def __init__(self, config: RLConfig, samplers: list[Any], rollouts: Any, rewards: list[Any],
                 published: int, first_step: int, last_step: int) -> None:
        self.config, self.samplers, self.rollouts, self.rewards = config, samplers, rollouts, rewards
        self.k = config.algorithm.max_staleness
        self.published = published
        self.next_step, self.last_step = first_step, last_step
        self.wanted = first_step - 1  # the step the learner asked for last
        self._cv = threading.Condition()
        self._steps: dict[int, StepGroups] = {}
        self._rounds: dict[int, list[tuple[int, Trajectory]]] = {}  # step -> (key, episode)
        self._round_size: dict[int, int] = {}
        self._ready: dict[int, CollectedBatch] = {}
        self._owner: dict[int, Any] = {}  # job key -> step number, or a _Waiter
        self._next_key = 0
        self._stats: dict[str, float] = {}
        self._error: BaseException | None = None
        self._closed = False
        rollouts.start_stream()
        self._thread = threading.Thread(target=self._main, name="rl-collector", daemon=True)
        self._thread.start()

    # -- the learner's side ---------------------------------------------------------------
    def batch(self, step: int) -> CollectedBatch:
        """Step ``step``'s groups, once all its rounds are back (blocks until then). Its stats
        hold where the workers' time went since the previous call."""
        with self._cv:
            self.wanted = step
            self._cv.notify_all()
            while step not in self._ready and self._error is None:
                self._cv.wait(0.5)
            self._raise()
            batch = self._ready.pop(step)
            batch.stats.update(self._stats)
            self._stats = {}
        return batch

    def publish(self, state: Any, version: int) -> None:
        """New weights to the workers (they load them between rounds); steps whose start
        rule they satisfy are admitted."""
        self.rollouts.offer_weights(state, version)
        with self._cv:
            self.published = version
            self._cv.notify_all()

    def run(self, jobs: list[EpisodeJob]) -> tuple[list[Trajectory], dict[str, float]]:
        """Play ``jobs`` (the periodic eval) on the stream under the published weights;
        returns their trajectories in order (a lost one is left out)."""
        import dataclasses

        waiter = _Waiter(len(jobs))
        with self._cv:
            items = [(self._key((waiter, index)), dataclasses.replace(job, min_version=self.published))
                     for index, job in enumerate(jobs)]
        self.rollouts.submit(items)
        with self._cv:
            while len(waiter.results) < waiter.count and self._error is None:
                self._cv.wait(0.5)
            self._raise()
        played = [waiter.results[i] for i in range(len(jobs))]
        return [t for t in played if t is not None], {}

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=60)
        self.rollouts.stop_stream()

    # -- the collector thread -------------------------------------------------------------
    def _key(self, owner: Any) -> int:
        self._next_key += 1
        self._owner[self._next_key] = owner
        return self._next_key

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError("the rollout stream failed") from self._error

    def _main(self) -> None:
        try:
            while True:
                with self._cv:
                    if self._closed:
                        return
                self._admit()
                keys, results = self.rollouts.collect(timeout=0.05)
                self._account(results)
                for key, trajectory in zip(keys, results.trajectories, strict=True):
                    self._route(key, trajectory)
                for key in getattr(results, "lost_keys", ()):
                    self._route(key, None)
        except BaseException as exc:  # the learner's wait raises it
            with self._cv:
                self._error = exc
                self._cv.notify_all()

    def _admit(self) -> None:
        """Submit the first round of every step the published version allows."""
        while True:
            with self._cv:
                step = self.next_step
                # k versions behind the published weights, and k steps ahead of the learner's
                # request (so an eval between two steps runs before the next step starts at
                # k = 0, as in the synchronous loop)
                if (step > self.last_step or step - 1 - self.k > self.published
                        or step > self.wanted + self.k):
                    return
                self.next_step += 1
            groups = StepGroups(self.config, self.samplers, step, self.rewards,
                                min_version=step - 1 - self.k)
            self._steps[step] = groups
            self._submit_round(step, groups.next_round())

    def _submit_round(self, step: int, jobs: list[EpisodeJob] | None) -> None:
        if jobs is None:  # the step is complete
            with self._cv:
                self._ready[step] = self._steps.pop(step).result()
                self._cv.notify_all()
            return
        self._rounds[step], self._round_size[step] = [], len(jobs)
        with self._cv:
            items = [(self._key(step), job) for job in jobs]
        self.rollouts.submit(items)

    def _route(self, key: int, trajectory: Trajectory | None) -> None:
        with self._cv:
            owner = self._owner.pop(key)
            if isinstance(owner, tuple):  # an eval episode
                waiter, index = owner
                waiter.results[index] = trajectory
                self._cv.notify_all()
                return
        step = owner
        if trajectory is not None:
            self._rounds[step].append((key, trajectory))
        else:  # a lost episode still completes its round (its group is dropped)
            self._round_size[step] -= 1
        if len(self._rounds[step]) >= self._round_size[step]:
            groups = self._steps[step]
            # in the order the jobs were drawn (keys grow), as the synchronous loop has them
            groups.add_round([t for _, t in sorted(self._rounds.pop(step), key=lambda kt: kt[0])],
                             {})
            self._submit_round(step, groups.next_round())

    def _account(self, results: Any) -> None:
        """Worker time and token counts, summed until the learner's next ``batch`` call."""
        from trainers.rl.actors import merged_stats

        stats = merged_stats([results])
        with self._cv:
            for key, value in stats.items():
                self._stats[key] = self._stats.get(key, 0.0) + value
            self._stats["async/interrupted_turns"] = self._stats.get(
                "async/interrupted_turns", 0.0) + float(results.interrupted_turns)
