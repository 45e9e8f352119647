"""The ``resources`` section of ``RLConfig``: where the workers and the learner run.

Split from ``trainers/rl/sections.py`` (which re-exports it) to keep each file to one job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from trainers.common.config import ConfigError, check_fields
from trainers.common.sections import at_least

__all__ = ["ResourcesSection"]


@dataclass
class ResourcesSection:
    """Where the workers and the learner run, and the knobs that trade memory for time."""

    use_ray: bool = True
    """False runs rollout workers and learner in this process (no ray needed)."""
    ray_address: str | None = None
    """Connect to an existing Ray cluster (``auto`` or host:port, what ``coa train rl
    --address`` sets); None starts one locally."""
    ray_runtime_env: dict[str, Any] = field(default_factory=dict)
    """Ray runtime_env of the run's actors, for a cluster whose nodes lack something the
    driver has, e.g. ``{env_vars: {HF_HOME: /data/hf}}`` or ``{py_modules: [...]}``."""
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """How Ray lays the run's bundles (one per learner rank, one per rollout worker) over
    nodes: PACK fills as few nodes as it can, SPREAD spreads them, STRICT_* insist."""
    learner_node_labels: dict[str, str] = field(default_factory=dict)
    """Ray label selector every learner rank's node must match: nodes started with
    ``ray start --labels role=learner`` match ``{role: learner}``; ``{zone: "!us-east"}``
    and ``{gpu: "in(a100,h100)"}`` are Ray's negation and set forms."""
    rollout_node_labels: dict[str, str] = field(default_factory=dict)
    """Ray label selector every rollout worker's node must match (its envs run with it)."""
    learner_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each learner rank reserves, e.g. ``{trainer_slot: 1}`` for nodes
    started with ``ray start --resources '{"trainer_slot": 1}'``."""
    rollout_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each rollout worker reserves."""
    placement_timeout_s: float = 300.0
    """How long to wait for the cluster to fit every bundle (an autoscaler may be adding
    nodes) before failing with what was asked and what the cluster has."""
    num_gpus: int = 0
    """GPUs for the whole run; the learner takes learner_gpus, workers share the rest."""
    num_rollout_workers: int = 1
    """Rollout worker processes (Ray actors)."""
    rollout_gpus_per_worker: float = 0.0
    """GPUs of each rollout worker (a fraction shares one GPU)."""
    cpus_per_worker: float = 1.0
    """CPUs Ray reserves per rollout worker."""
    learner_workers: int = 1
    """Learner processes (Ray actors, ranks of ``learner_strategy``); each trains on its
    shard of every minibatch and the gradients are averaged over ranks (NCCL on GPUs,
    gloo on CPU)."""
    learner_strategy: Literal["ddp", "fsdp"] = "ddp"
    """How the learner ranks hold the model: ``ddp`` replicas (each rank holds everything),
    or ``fsdp`` (torch FSDP2: each rank holds 1/learner_workers of the weights, gradients
    and optimiser state; for policies whose training state does not fit one device).
    Checkpoints are unsharded either way, so a run resumes under either strategy and any
    learner_workers."""
    learner_gpus: float = 0.0
    """GPUs of each learner rank; a fraction (e.g. 0.5) shares one GPU with the rollout
    workers (rollout_gpus_per_worker 0.5), which is how one-GPU machines run."""
    micro_batch_size: int = 8
    """Episodes per forward/backward (gradient accumulation inside a minibatch)."""
    torch_threads: int = 0
    """torch intra-op threads per process (0 = torch's default). On a small shared CPU box 1
    is far faster: oversubscribed OpenMP threads spin against each other."""

    def __post_init__(self) -> None:
        check_fields(self, "resources.")
        at_least(self, "resources.", 1, ("num_rollout_workers", "learner_workers",
                                          "micro_batch_size"))
        at_least(self, "resources.", 0, ("num_gpus", "rollout_gpus_per_worker",
                                          "cpus_per_worker", "learner_gpus", "torch_threads"))
        for name in ("learner_resources", "rollout_resources"):
            for key, amount in getattr(self, name).items():
                if key in ("CPU", "GPU", "memory", "object_store_memory"):
                    raise ConfigError(f"resources.{name}.{key}: CPUs and GPUs have their own keys "
                                      "(cpus_per_worker, learner_gpus, ...); list custom "
                                      "resources here")
                if not isinstance(amount, int | float) or isinstance(amount, bool) or amount < 0:
                    raise ConfigError(f"resources.{name}.{key}={amount!r}: must be a number >= 0")
        for name in ("learner_node_labels", "rollout_node_labels"):
            for key, value in getattr(self, name).items():
                if not isinstance(value, str):
                    raise ConfigError(f"resources.{name}.{key}={value!r}: a label selector value "
                                      "is a string (quote it in YAML)")
        if self.placement_timeout_s <= 0:
            raise ConfigError("resources.placement_timeout_s must be > 0")
