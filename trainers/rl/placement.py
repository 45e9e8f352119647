"""Where the run's Ray actors go: joining or starting Ray, one placement group, node facts.

The run reserves one bundle per learner rank (bundles ``0 .. learner_workers-1``) and one
per rollout worker (the rest) in a single placement group, so a config that fits is placed
all at once or not at all, on one machine or across a cluster. What a bundle asks for comes
from ``resources``: CPUs/GPUs, custom resources (``learner_resources``,
``rollout_resources``: nodes started with ``ray start --resources``) and node label
selectors (``learner_node_labels``, ``rollout_node_labels``: nodes started with ``ray start
--labels``); ``placement_strategy`` says how bundles spread over nodes. A rollout worker
owns its envs, so envs (and their tools) run where their worker runs.

Losing a node: Ray re-places that node's bundles when the cluster has room (the actors in
them restart there; ``actors.py`` takes them back into service) and otherwise leaves them
pending while the run carries on with the workers it has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainers.rl.config import RLConfig

__all__ = ["alive_nodes", "bundles", "connect", "node_of", "placement_group_for"]


def bundles(config: RLConfig) -> tuple[list[dict[str, float]], list[dict[str, str]]]:
    """The placement group's bundles and their label selectors, learner ranks first."""
    res = config.resources
    learner: dict[str, float] = {"CPU": 1.0, **res.learner_resources}
    if res.learner_gpus:
        learner["GPU"] = res.learner_gpus
    worker: dict[str, float] = {"CPU": res.cpus_per_worker, **res.rollout_resources}
    if res.rollout_gpus_per_worker:
        worker["GPU"] = res.rollout_gpus_per_worker
    # Ray refuses an all-zero bundle: a worker that reserves nothing holds a token CPU share.
    worker = {k: v for k, v in worker.items() if v > 0} or {"CPU": 0.01}
    shapes = [dict(learner) for _ in range(res.learner_workers)]
    shapes += [dict(worker) for _ in range(res.num_rollout_workers)]
    selectors = [dict(res.learner_node_labels) for _ in range(res.learner_workers)]
    selectors += [dict(res.rollout_node_labels) for _ in range(res.num_rollout_workers)]
    return shapes, selectors


def connect(config: RLConfig) -> None:
    """Join ``resources.ray_address`` or start a local Ray sized for the run (once per process)."""
    import ray

    if ray.is_initialized():
        return
    res = config.resources
    runtime_env = dict(res.ray_runtime_env) or None
    if res.ray_address:
        ray.init(address=res.ray_address, runtime_env=runtime_env, log_to_driver=True)
        return
    cpus = res.learner_workers + res.num_rollout_workers * res.cpus_per_worker
    ray.init(num_cpus=int(max(cpus, 2)), num_gpus=res.num_gpus, include_dashboard=False,
             log_to_driver=True, runtime_env=runtime_env)


def placement_group_for(config: RLConfig) -> Any:
    """The run's placement group, ready; a clear error naming what did not fit otherwise."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    shapes, selectors = bundles(config)
    labelled = any(selectors)
    group = placement_group(shapes, strategy=config.resources.placement_strategy,
                            bundle_label_selector=selectors if labelled else None)
    timeout = config.resources.placement_timeout_s
    ready, _ = ray.wait([group.ready()], timeout=timeout)
    if not ready:
        remove_placement_group(group)
        nodes = [(n.get("NodeManagerAddress"), n.get("Resources"), _user_labels(n))
                 for n in ray.nodes() if n.get("Alive")]
        raise RuntimeError(
            f"Ray could not place the run's {len(shapes)} bundles within {timeout:g} s "
            f"(resources.placement_timeout_s). Asked for, learner ranks first: {shapes}"
            + (f" with node labels {selectors}" if labelled else "")
            + f", strategy {config.resources.placement_strategy}. Alive nodes (address, "
            f"resources, labels): {nodes}. Lower the counts, or start nodes with the "
            "resources/labels asked for (ray start --resources/--labels).")
    return group


def _user_labels(node: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (node.get("Labels") or {}).items() if not k.startswith("ray.io/")}


def alive_nodes() -> int:
    """Nodes of the Ray cluster that are alive now (the ``cluster/nodes`` metric)."""
    import ray

    return sum(1 for node in ray.nodes() if node.get("Alive"))


def node_of() -> str:
    """The Ray node id of the calling actor (for placement checks and metrics)."""
    import ray

    return ray.get_runtime_context().get_node_id()
