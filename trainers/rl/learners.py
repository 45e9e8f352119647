"""The learner side of ``actors.py``: in this process, or ``learner_workers`` Ray actors.

``LocalLearner`` wraps :class:`trainers.rl.learner.Learner`; ``RayLearner`` runs one
``_LearnerRank`` actor per DDP/FSDP rank and answers for the group (rank 0), with the same
surface: ``prepare / update / policy_state / state_dict / load_state_dict / save_pretrained``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainers.rl.config import RLConfig

__all__ = ["LocalLearner", "RayLearner", "resolve"]


def resolve(value: Any) -> Any:
    """A Ray object reference's value (what a call passed by reference), else ``value``."""
    import ray

    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


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
        return getattr(self.learner, name)(*(resolve(a) for a in args))

    def node(self) -> str:
        from trainers.rl.placement import node_of

        return node_of()


class RayLearner:
    """``learner_workers`` learner actors (DDP ranks, ``learner_gpus`` GPUs each); rank 0
    answers for the group.

    ``prepare`` (no-grad passes, advantages) runs on rank 0; ``update`` runs on every rank
    with the same prepared batch (one ``ray.put``), each rank training on its shard of
    every minibatch while DDP averages the gradients, so the replicas stay identical.
    With ``learner_strategy: fsdp`` every forward is a collective (each rank holds only
    shards), so ``prepare`` and the state calls run on every rank too; rank 0 answers.
    """

    def __init__(self, config: RLConfig, placement_group: Any = None) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        res = config.resources
        world = res.learner_workers
        actor_cls = ray.remote(_LearnerRank)
        self.actors = []
        for rank in range(world):
            options: dict[str, Any] = {"num_cpus": 1, "num_gpus": res.learner_gpus,
                                       "resources": dict(res.learner_resources)}
            if placement_group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=placement_group, placement_group_bundle_index=rank)
            elif res.learner_node_labels:
                options["label_selector"] = dict(res.learner_node_labels)
            self.actors.append(actor_cls.options(**options).remote(config, rank, world))
        address = ray.get(self.actors[0].rendezvous_address.remote()) if world > 1 else None
        ray.get([actor.setup.remote(address) for actor in self.actors])  # joins all ranks
        sharded = world > 1 and res.learner_strategy == "fsdp"
        self._gathering = self._all if sharded else self._rank0

    def _rank0(self, name: str, *args: Any) -> Any:
        import ray

        return ray.get(self.actors[0].call.remote(name, *args))

    def _all(self, name: str, *args: Any) -> Any:
        import ray

        refs = [ray.put(a) for a in args] if len(self.actors) > 1 else list(args)
        return ray.get([actor.call.remote(name, *refs) for actor in self.actors])[0]

    def prepare(self, batch: Any) -> Any:
        return self._gathering("prepare", batch)

    def update(self, batch: Any) -> Any:
        return self._all("update", batch)

    def policy_state(self) -> Any:
        return self._gathering("policy_state")

    def state_dict(self) -> Any:
        return self._gathering("state_dict")

    def load_state_dict(self, state: Any) -> Any:
        return self._all("load_state_dict", state)

    def save_pretrained(self, directory: str) -> Any:
        return self._gathering("save_pretrained", directory)

    def nodes(self) -> list[str]:
        """Ray node id of every rank, rank 0 first."""
        import ray

        return ray.get([actor.node.remote() for actor in self.actors])

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
