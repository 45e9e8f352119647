"""Where the workers and the learner run: in this process (local) or as Ray actors.

Both groups expose the same small surface so ``loop.py`` does not know which it has:
``RolloutGroup.run(jobs) -> (trajectories, stats)`` / ``set_weights(state, version)`` and
``LearnerGroup.prepare / update / policy_state / state_dict / load_state_dict``.

Ray mode: rollout workers are actors with ``max_restarts=-1``, placed with the learner
ranks in one placement group (``placement.py``: resources, node labels, strategy) so one
machine, one machine with N GPUs or a multi-node cluster runs the same config. They are
managed by RLlib's ``FaultTolerantActorManager``, which marks an actor unhealthy when a
call dies with it, and probes restarted actors back into service. A shard lost with a
crashed worker or node is re-run at once on the healthy workers, up to
``max_episode_retries`` times, then dropped; ``rollout/lost_episodes``,
``retried_episodes`` and ``dropped_episodes`` count them, ``cluster/*`` the nodes and
workers in service. A restarted worker gets the current weights before it serves again.
Weights travel through the object store (one ``ray.put`` per update, read by every worker).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from trainers.rl.learners import LocalLearner, RayLearner, resolve
from trainers.rl.rollout import EpisodeJob, RolloutResult, RolloutWorker

if TYPE_CHECKING:
    from agents.trajectory import Trajectory
    from trainers.rl.config import RLConfig

# LocalLearner and RayLearner live in learners.py; imported here for build_groups and callers
__all__ = ["LocalLearner", "LocalRollouts", "RayLearner", "RayRollouts", "build_groups",
           "merged_stats"]


# A probe of a restarting actor fails fast; this bounds one of a hung actor.
_PROBE_S = 5.0


def merged_stats(results: list[RolloutResult]) -> dict[str, float]:
    """Where one call's time went, over every worker that answered (``time/*``, ``errors/*``)."""
    stats: dict[str, float] = {
        "time/generation_s": max((r.generation_s for r in results), default=0.0),
        "time/env_s": sum(r.env_s for r in results),
        "time/env_blocking_s": max((r.env_blocking_s for r in results), default=0.0),
        "rollout/generated_tokens_total": float(sum(r.generated_tokens for r in results)),
    }
    errors: Counter = Counter()
    for r in results:
        errors.update(r.errors)
    for kind, count in errors.items():
        stats[f"errors/{kind}"] = float(count)
    return stats


def _shards(jobs: list[EpisodeJob], parts: int) -> list[list[EpisodeJob]]:
    """Contiguous shards so a group's samples mostly share a worker (one prompt prefix)."""
    size = -(-len(jobs) // max(parts, 1))
    return [jobs[i:i + size] for i in range(0, len(jobs), size)] if jobs else []


def _copied(state: Any) -> Any:
    from dataclasses import replace

    from agents.engines.lora import LoraWeights

    if isinstance(state, LoraWeights):
        return replace(state, tensors={k: v.clone() for k, v in state.tensors.items()})
    return {k: v.clone() for k, v in state.items()}


class LocalRollouts:
    """Rollout workers in this process (``use_ray: false``), run one after another."""

    def __init__(self, config: RLConfig, overlap_tools: bool = True) -> None:
        self.workers = [RolloutWorker(config, 0, overlap_tools=overlap_tools)]

    def num_tasks(self, heldout: bool = False, env_index: int = 0) -> int:
        return self.workers[0].num_tasks(heldout, env_index)

    def set_weights(self, state: dict[str, Any], version: int) -> None:
        for worker in self.workers:
            worker.set_weights(state, version)

    def run(self, jobs: list[EpisodeJob]) -> tuple[list[Trajectory], dict[str, float]]:
        results = [self.workers[0].run(jobs)]
        stats = merged_stats(results)
        stats.update({"rollout/lost_episodes": 0.0, "rollout/retried_episodes": 0.0,
                      "rollout/dropped_episodes": 0.0})
        return [t for r in results for t in r.trajectories], stats

    def cluster_stats(self) -> dict[str, float]:
        return {"cluster/nodes": 1.0}

    # -- streaming (asynchronous RL): see RolloutWorker --------------------------------------
    def start_stream(self) -> None:
        self.workers[0].start_stream()

    def stop_stream(self) -> None:
        self.workers[0].stop_stream()

    def submit(self, items: list[tuple[Any, EpisodeJob]]) -> None:
        self.workers[0].submit(items)

    def collect(self, timeout: float = 0.0) -> tuple[list[Any], RolloutResult]:
        return self.workers[0].collect(timeout)

    def offer_weights(self, state: Any, version: int) -> None:
        # A copy: the learner's next update changes its tensors in place while the worker
        # may not have loaded these yet (Ray copies through its object store anyway).
        self.workers[0].offer_weights(_copied(state), version)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


class RayRollouts:
    """Rollout worker actors under RLlib's FaultTolerantActorManager."""

    def __init__(self, config: RLConfig, placement_group: Any = None) -> None:
        import ray
        from ray.rllib.utils.actor_manager import FaultTolerantActorManager
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.config = config
        res = config.resources
        actor_cls = ray.remote(max_restarts=-1, max_task_retries=0)(RolloutWorker)
        actors = []
        for index in range(res.num_rollout_workers):
            options: dict[str, Any] = {"num_cpus": res.cpus_per_worker,
                                       "num_gpus": res.rollout_gpus_per_worker,
                                       "resources": dict(res.rollout_resources)}
            if placement_group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=placement_group,
                    placement_group_bundle_index=res.learner_workers + index)
            elif res.rollout_node_labels:
                options["label_selector"] = dict(res.rollout_node_labels)
            actors.append(actor_cls.options(**options).remote(config, index))
        self.manager = FaultTolerantActorManager(actors)
        self.placement_group = placement_group
        self._weights_ref: Any = None
        self._version = -1
        self.restarts = 0
        self._nodes: dict[int, str] = {}  # filled lazily: actors may still be loading

    def num_tasks(self, heldout: bool = False, env_index: int = 0) -> int:
        results = self.manager.foreach_actor(lambda w: w.num_tasks(heldout, env_index),
                                             remote_actor_ids=[self.manager.healthy_actor_ids()[0]])
        return next(iter(results)).get()

    def set_weights(self, state: dict[str, Any], version: int) -> None:
        import ray

        self._weights_ref = ray.put(state)
        self._version = version
        self._push_weights(self.manager.healthy_actor_ids())

    def _push_weights(self, actor_ids: list[int]) -> None:
        if self._weights_ref is None or not actor_ids:
            return
        ref, version = self._weights_ref, self._version
        self.manager.foreach_actor(lambda w: w.set_weights(resolve(ref), version),
                                   remote_actor_ids=actor_ids,
                                   timeout_seconds=self.config.rollout.timeout_s)

    def worker_nodes(self) -> dict[int, str]:
        """Ray node id of every healthy worker (by actor id); asked once per (re)start."""
        from trainers.rl.placement import node_of

        healthy = self.manager.healthy_actor_ids()
        unknown = [actor_id for actor_id in healthy if actor_id not in self._nodes]
        if unknown:
            replies = self.manager.foreach_actor(lambda w: node_of(), remote_actor_ids=unknown,
                                                 timeout_seconds=self.config.rollout.timeout_s)
            self._nodes.update({reply.actor_id: reply.get() for reply in replies if reply.ok})
        return {actor_id: self._nodes[actor_id] for actor_id in healthy
                if actor_id in self._nodes}

    def cluster_stats(self) -> dict[str, float]:
        """Gauges of the cluster as this step saw it (logged once per step, never summed)."""
        from trainers.rl.placement import alive_nodes

        nodes = self.worker_nodes()
        return {"cluster/nodes": float(alive_nodes()),
                "cluster/rollout_workers_healthy": float(len(nodes)),
                "cluster/rollout_worker_nodes": float(len(set(nodes.values())))}

    def _revive(self, wait: bool) -> None:
        """Bring restarted actors back into service with the current weights.

        Ray restarts a dead actor in a new process, on its node or, when the node is gone,
        wherever its bundle is re-placed; that takes seconds (env and model load), and a
        call meanwhile fails fast ("the actor is restarting"). Without ``wait`` one probe;
        with it (no worker is left to run the episodes) probing repeats until a worker
        answers or ``worker_restart_timeout_s`` passes.
        """
        deadline = time.monotonic() + self.config.rollout.worker_restart_timeout_s
        while True:
            restored = self.manager.probe_unhealthy_actors(timeout_seconds=_PROBE_S,
                                                           mark_healthy=True)
            if restored:
                self.restarts += len(restored)
                self._push_weights(restored)
                for actor_id in restored:  # it may have restarted on another node
                    self._nodes.pop(actor_id, None)
            if not wait or self.manager.healthy_actor_ids() or time.monotonic() > deadline:
                return
            time.sleep(0.5)

    def run(self, jobs: list[EpisodeJob]) -> tuple[list[Trajectory], dict[str, float]]:
        """Every job's trajectory exactly once, unless a job was lost more often than
        ``max_episode_retries`` allows (then dropped and counted).

        A shard whose worker dies (its node lost, its process killed) or times out is *lost*
        and *retried* at once on the workers still healthy; only when none is left does the
        retry wait for Ray to restart one. A lost call's partial results never come back, so
        a retried episode cannot be returned twice.
        """
        results: list[RolloutResult] = []
        pending = [jobs]
        lost = retried = 0
        restarts_before = self.restarts
        retries = self.config.rollout.max_episode_retries
        for attempt in range(retries + 1):
            healthy = self.manager.healthy_actor_ids()
            if not healthy:
                self._revive(wait=True)
                healthy = self.manager.healthy_actor_ids()
            if not healthy:
                break
            todo = [job for shard in pending for job in shard]
            retried += len(todo) if attempt else 0
            # At most one shard per healthy actor, so replies map back to shards by actor.
            shards = _shards(todo, len(healthy))
            ids = healthy[:len(shards)]
            calls = [lambda w, s=shard: w.run(s) for shard in shards]
            replies = self.manager.foreach_actor(
                calls, kwargs=[{} for _ in calls], remote_actor_ids=ids,
                timeout_seconds=self.config.rollout.timeout_s)
            answered = {reply.actor_id: reply.get() for reply in replies if reply.ok}
            pending = []
            for actor_id, shard in zip(ids, shards, strict=True):
                if actor_id in answered:
                    results.append(answered[actor_id])
                else:
                    pending.append(shard)
            lost += sum(len(shard) for shard in pending)
            if not pending or attempt == retries:
                break
            self._revive(wait=False)  # a worker that is back already takes a share
        self._revive(wait=False)  # restarted workers rejoin for the next call
        stats = merged_stats(results)
        stats.update({
            "rollout/lost_episodes": float(lost),
            "rollout/retried_episodes": float(retried),
            "rollout/dropped_episodes": float(sum(len(s) for s in pending)),
            "rollout/worker_restarts": float(self.restarts - restarts_before),
        })
        return [t for r in results for t in r.trajectories], stats

    # -- streaming (asynchronous RL): see RolloutWorker --------------------------------------
    def start_stream(self) -> None:
        # the collector thread submits and collects; the learner's thread offers weights and
        # submits the eval: one lock over the bookkeeping both touch
        self._stream_lock = threading.RLock()
        self._outstanding: dict[int, dict[Any, EpisodeJob]] = {}  # actor id -> key -> job
        self._retries: Counter = Counter()
        self._streaming = set(self.manager.healthy_actor_ids())
        self.manager.foreach_actor(lambda w: w.start_stream(), remote_actor_ids=list(self._streaming))

    def stop_stream(self) -> None:
        self.manager.foreach_actor(lambda w: w.stop_stream(), timeout_seconds=60)

    def submit(self, items: list[tuple[Any, EpisodeJob]]) -> None:
        """Each group's episodes to one worker (they share a prompt prefix), to the worker
        with the fewest outstanding episodes."""
        with self._stream_lock:
            self._submit(items)

    def _submit(self, items: list[tuple[Any, EpisodeJob]]) -> None:
        deadline = time.monotonic() + self.config.rollout.worker_restart_timeout_s
        while not (healthy := [a for a in self.manager.healthy_actor_ids()
                               if a in self._streaming]):
            if time.monotonic() > deadline:
                raise RuntimeError("no rollout worker came back within "
                                   "rollout.worker_restart_timeout_s")
            self._rejoin(force=True)
            time.sleep(0.5)
        by_group: dict[Any, list[tuple[Any, EpisodeJob]]] = {}
        for key, job in items:
            by_group.setdefault((job.step, job.group_id, job.heldout), []).append((key, job))
        actors = self.manager.actors()
        for group in by_group.values():
            actor_id = min(healthy, key=lambda a: len(self._outstanding.get(a, {})))
            self._outstanding.setdefault(actor_id, {}).update(group)
            actors[actor_id].submit.remote(group)

    def offer_weights(self, state: Any, version: int) -> None:
        import ray

        ref = ray.put(state)
        with self._stream_lock:  # collect() may drop a dead worker from _streaming meanwhile
            self._weights_ref, self._version = ref, version
            for actor_id in self._streaming:
                self.manager.actors()[actor_id].offer_weights.remote(ref, version)

    def collect(self, timeout: float = 0.0) -> tuple[list[Any], RolloutResult]:
        """Finished episodes of every streaming worker; a worker that died has its
        outstanding episodes re-submitted (``max_episode_retries``) or reported lost."""
        with self._stream_lock:
            return self._collect(timeout)

    def _collect(self, timeout: float) -> tuple[list[Any], RolloutResult]:
        import ray

        actors = self.manager.actors()
        calls = {a: actors[a].collect.remote(timeout) for a in list(self._streaming)}
        keys: list[Any] = []
        merged = RolloutResult(trajectories=[])
        orphans: list[tuple[Any, EpisodeJob]] = []
        for actor_id, ref in calls.items():
            try:
                got, result = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                self.manager.set_actor_state(actor_id, healthy=False)
                self._streaming.discard(actor_id)
                orphans.extend(self._outstanding.pop(actor_id, {}).items())
                continue
            mine = self._outstanding.get(actor_id, {})
            for key in got:
                mine.pop(key, None)
            keys.extend(got)
            merged.trajectories.extend(result.trajectories)
            for name in ("generation_s", "env_s", "env_blocking_s", "generated_tokens",
                         "interrupted_turns"):
                setattr(merged, name, getattr(merged, name) + getattr(result, name))
        retry = [(k, j) for k, j in orphans if self._retries[k] < self.config.rollout.max_episode_retries]
        merged.lost_keys = [k for k, j in orphans if (k, j) not in retry]  # type: ignore[attr-defined]
        for key, _ in retry:
            self._retries[key] += 1
        self._rejoin()
        if retry:
            self._submit(retry)
        return keys, merged

    def _rejoin(self, force: bool = False) -> None:
        """Restarted workers come back with the current weights and their stream running
        (probed at most every 2 s: a probe of a hung actor takes up to ``_PROBE_S``)."""
        now = time.monotonic()
        if not force and (len(self._streaming) == len(self.manager.actors())
                          or now - getattr(self, "_probed_at", 0.0) < 2.0):
            return
        self._probed_at = now
        restored = self.manager.probe_unhealthy_actors(timeout_seconds=_PROBE_S, mark_healthy=True)
        for actor_id in restored:
            actor = self.manager.actors()[actor_id]
            if getattr(self, "_weights_ref", None) is not None:
                actor.offer_weights.remote(self._weights_ref, self._version)
            actor.start_stream.remote()
            self._streaming.add(actor_id)
            self.restarts += 1

    def close(self) -> None:
        import ray

        for actor in self.manager.actors().values():
            ray.kill(actor)
        if self.placement_group is not None:  # frees the learners' bundles too
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement_group)


def build_groups(config: RLConfig) -> tuple[Any, Any]:
    """``(rollouts, learner)`` for the config: in-process, or Ray actors in a placement group
    (``placement.py``) on a local Ray or the cluster at ``resources.ray_address``."""
    if not config.resources.use_ray:
        return LocalRollouts(config), LocalLearner(config)
    from trainers.rl.placement import connect, placement_group_for

    connect(config)
    group = placement_group_for(config)
    return RayRollouts(config, group), RayLearner(config, group)
