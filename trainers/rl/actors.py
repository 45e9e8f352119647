"""Where the workers and the learner run: in this process (local) or as Ray actors.

Both groups expose the same small surface so ``loop.py`` does not know which it has:
``RolloutGroup.run(jobs) -> (trajectories, stats)`` / ``set_weights(state, version)`` and
``LearnerGroup.prepare / update / policy_state / state_dict / load_state_dict``.

Ray mode: rollout workers are actors with ``max_restarts=-1`` placed in a placement
group (one bundle per worker, GPUs per config) so one machine with N GPUs or a cluster
runs the same config. They are managed by RLlib's ``FaultTolerantActorManager``, which
marks an actor unhealthy when a call dies with it, and probes restarted actors back into
service; a shard lost with a crashed worker is re-run on a healthy one up to
``max_episode_retries`` times, then dropped and counted. A restarted worker gets the
current weights before it serves again. Weights travel through the object store (one
``ray.put`` per update, read by every worker).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from trainers.rl.rollout import EpisodeJob, RolloutResult, RolloutWorker

if TYPE_CHECKING:
    from agents.trajectory import Trajectory
    from trainers.rl.config import RLConfig

__all__ = ["LocalLearner", "LocalRollouts", "RayLearner", "RayRollouts", "build_groups"]


def _merge(results: list[RolloutResult]) -> dict[str, float]:
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


def _resolve(value: Any) -> Any:
    import ray

    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


def _shards(jobs: list[EpisodeJob], parts: int) -> list[list[EpisodeJob]]:
    """Contiguous shards so a group's samples mostly share a worker (one prompt prefix)."""
    size = -(-len(jobs) // max(parts, 1))
    return [jobs[i:i + size] for i in range(0, len(jobs), size)] if jobs else []


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
        stats = _merge(results)
        stats["rollout/dropped_episodes"] = 0.0
        return [t for r in results for t in r.trajectories], stats

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
                                       "num_gpus": res.rollout_gpus_per_worker}
            if placement_group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=placement_group,
                    placement_group_bundle_index=res.learner_workers + index)
            actors.append(actor_cls.options(**options).remote(config, index))
        self.manager = FaultTolerantActorManager(actors)
        self.placement_group = placement_group
        self._weights_ref: Any = None
        self._version = -1
        self.restarts = 0

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
        self.manager.foreach_actor(lambda w: w.set_weights(_resolve(ref), version),
                                   remote_actor_ids=actor_ids,
                                   timeout_seconds=self.config.rollout.timeout_s)

    def _revive(self, wait: bool) -> None:
        """Bring restarted actors back into service with the current weights.

        Ray restarts a dead actor in a new process, which takes seconds (env and model load),
        and a probe sent meanwhile fails fast. With ``wait`` (episodes are waiting for a
        retry) probing repeats until every actor answers or ``worker_restart_timeout_s``
        passes; otherwise one probe, so an actor that never comes back costs no step a wait.
        """
        deadline = time.monotonic() + self.config.rollout.worker_restart_timeout_s
        while True:
            restored = self.manager.probe_unhealthy_actors(timeout_seconds=30, mark_healthy=True)
            if restored:
                self.restarts += len(restored)
                self._push_weights(restored)
            everyone = self.manager.num_healthy_actors() == self.manager.num_actors()
            if not wait or everyone or time.monotonic() > deadline:
                return
            time.sleep(0.5)

    def run(self, jobs: list[EpisodeJob]) -> tuple[list[Trajectory], dict[str, float]]:
        results: list[RolloutResult] = []
        pending = [jobs]
        dropped = 0
        retries = self.config.rollout.max_episode_retries
        for attempt in range(retries + 1):
            healthy = self.manager.healthy_actor_ids()
            if not healthy:
                self._revive(wait=True)
                healthy = self.manager.healthy_actor_ids()
            if not healthy:
                break
            # At most one shard per healthy actor, so replies map back to shards by actor.
            shards = _shards([job for shard in pending for job in shard], len(healthy))
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
            retry_left = attempt < retries
            self._revive(wait=bool(pending) and retry_left)
            if not pending or not retry_left:
                break
        dropped = sum(len(s) for s in pending)
        stats = _merge(results)
        stats["rollout/dropped_episodes"] = float(dropped)
        stats["rollout/worker_restarts"] = float(self.restarts)
        return [t for r in results for t in r.trajectories], stats

    def close(self) -> None:
        import ray

        for actor in self.manager.actors().values():
            ray.kill(actor)
        if self.placement_group is not None:  # frees the learners' bundles too
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement_group)


class LocalLearner:
    """The learner in this process."""

    def __init__(self, config: RLConfig) -> None:
        from trainers.rl.learner import Learner

        self.learner = Learner(config)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.learner, name)


class _LearnerRank:
    """One DDP rank as a Ray actor: finds a rendezvous address, then builds its Learner."""

    def __init__(self, config: RLConfig, rank: int, world_size: int) -> None:
        self.config, self.rank, self.world_size = config, rank, world_size
        self.learner: Any = None

    def rendezvous_address(self) -> str:
        """``tcp://ip:port`` on this actor's node (asked of rank 0 only)."""
        import socket

        import ray

        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return f"tcp://{ray.util.get_node_ip_address()}:{port}"

    def setup(self, init_method: str | None) -> int:
        from trainers.rl.learner import Learner

        self.learner = Learner(self.config, self.rank, self.world_size, init_method)
        return self.rank

    def call(self, name: str, *args: Any) -> Any:
        return getattr(self.learner, name)(*(_resolve(a) for a in args))


class RayLearner:
    """``learner_workers`` learner actors (DDP ranks, ``learner_gpus`` GPUs each); rank 0
    answers for the group.

    ``prepare`` (no-grad passes, advantages) runs on rank 0; ``update`` runs on every rank
    with the same prepared batch (one ``ray.put``), each rank training on its shard of
    every minibatch while DDP averages the gradients, so the replicas stay identical.
    """

    def __init__(self, config: RLConfig, placement_group: Any = None) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        world = config.resources.learner_workers
        actor_cls = ray.remote(_LearnerRank)
        self.actors = []
        for rank in range(world):
            options: dict[str, Any] = {"num_cpus": 1, "num_gpus": config.resources.learner_gpus}
            if placement_group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=placement_group, placement_group_bundle_index=rank)
            self.actors.append(actor_cls.options(**options).remote(config, rank, world))
        address = ray.get(self.actors[0].rendezvous_address.remote()) if world > 1 else None
        ray.get([actor.setup.remote(address) for actor in self.actors])  # joins all ranks

    def _rank0(self, name: str, *args: Any) -> Any:
        import ray

        return ray.get(self.actors[0].call.remote(name, *args))

    def _all(self, name: str, *args: Any) -> Any:
        import ray

        refs = [ray.put(a) for a in args] if len(self.actors) > 1 else list(args)
        return ray.get([actor.call.remote(name, *refs) for actor in self.actors])[0]

    def prepare(self, batch: Any) -> Any:
        return self._rank0("prepare", batch)

    def update(self, batch: Any) -> Any:
        return self._all("update", batch)

    def policy_state(self) -> Any:
        return self._rank0("policy_state")

    def state_dict(self) -> Any:
        return self._rank0("state_dict")

    def load_state_dict(self, state: Any) -> Any:
        return self._all("load_state_dict", state)

    def save_pretrained(self, directory: str) -> Any:
        return self._rank0("save_pretrained", directory)

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)


def build_groups(config: RLConfig) -> tuple[Any, Any]:
    """``(rollouts, learner)`` for the config: in-process, or Ray actors in a placement group."""
    res = config.resources
    if not res.use_ray:
        return LocalRollouts(config), LocalLearner(config)
    import ray

    if not ray.is_initialized():
        if res.ray_address:
            ray.init(address=res.ray_address)
        else:
            cpus = res.learner_workers + res.num_rollout_workers * res.cpus_per_worker
            ray.init(num_cpus=int(max(cpus, 2)), num_gpus=res.num_gpus,
                     include_dashboard=False, log_to_driver=True)
    from ray.util.placement_group import placement_group

    learner = {"CPU": 1, **({"GPU": res.learner_gpus} if res.learner_gpus else {})}
    bundles = [dict(learner) for _ in range(res.learner_workers)]
    for _ in range(res.num_rollout_workers):
        bundle: dict[str, float] = {"CPU": res.cpus_per_worker}
        if res.rollout_gpus_per_worker:
            bundle["GPU"] = res.rollout_gpus_per_worker
        bundles.append(bundle)
    group = placement_group(bundles, strategy="PACK")
    ray.get(group.ready(), timeout=300)
    return RayRollouts(config, group), RayLearner(config, group)
