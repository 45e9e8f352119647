"""RL trainer configuration: sections, algorithm presets resolved at load time, validation.

PPO, GRPO and DAPO are one loop (``trainers/rl/loop.py``) with different settings, so this
file is where they differ. ``RLConfig`` has seven sections: ``algorithm`` (what is optimised
and how), ``model``, ``env``, ``rollout`` (how episodes are sampled), ``resources`` (where
things run), ``bookkeeping`` and ``health`` (rollout-health alarms). :func:`load_config`
reads YAML + ``key=value`` overrides (``algorithm.lr=1e-5``) through the shared loader
(``trainers/common/config.py``) and fills the chosen algorithm's preset into every
``algorithm`` key the user did not set, so a loaded config holds concrete values only
(``config.json`` in the run directory shows them all). Every section validates itself in
``__post_init__``; ``RLConfig`` checks what spans sections. Stdlib + PyYAML only.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.common.config import ConfigError, check_fields
from trainers.common.config import load_config as _load
from trainers.common.model import moved_model_keys
from trainers.common.sections import Bookkeeping
from trainers.rl.health import AlarmSpec, HealthSection
from trainers.rl.sections import (
    AlgorithmSection,
    EnvSection,
    ModelSection,
    ResourcesSection,
    RolloutSection,
    WarmStartSection,
)

__all__ = ["PRESETS", "AlarmSpec", "AlgorithmSection", "ConfigError", "EnvSection", "HealthSection",
           "ModelSection", "RLBookkeeping", "RLConfig", "ResourcesSection", "RolloutSection", "WarmStartSection",
           "load_config"]

# The keys each algorithm sets; the rest of ``algorithm`` shares one default. DAPO's overlong
# buffer is a quarter of ``rollout.max_response_tokens`` (resolved in _resolve_presets).
PRESETS: dict[str, dict[str, Any]] = {
    "ppo": {"critic": "value_head", "clip_eps_low": 0.2, "clip_eps_high": 0.2,
            "loss_agg": "token-mean", "kl_coef": 0.0, "dynamic_sampling": False,
            "overlong_buffer": 0, "group_size": 1},
    "grpo": {"critic": "none", "clip_eps_low": 0.2, "clip_eps_high": 0.2,
             "loss_agg": "seq-mean-token-mean", "kl_coef": 0.001, "dynamic_sampling": False,
             "overlong_buffer": 0, "group_size": 8},
    "dapo": {"critic": "none", "clip_eps_low": 0.2, "clip_eps_high": 0.28,
             "loss_agg": "token-mean", "kl_coef": 0.0, "dynamic_sampling": True,
             "group_size": 8},
}


@dataclass
class RLBookkeeping(Bookkeeping):
    """Run directory, checkpoints, resume, and the periodic eval."""

    output_dir: str = "runs/rl"
    save_every: int = 5
    eval_every: int = 0
    """Every N steps (and before the first) score the policy on ``eval_episodes`` episodes of
    the env's held-out tasks (``split: test``, never trained on; ``env.eval_kwargs``) with
    fixed seeds, logged as ``eval/heldout_reward_mean`` (and ``eval/heldout_tasks``, the
    number of distinct tasks): a low-noise view of generalisation next to the batch reward.
    0 = off."""
    eval_episodes: int = 64
    """Episodes per eval, cycling over the held-out tasks."""
    plot: bool = True
    """Write reward_curve.png (batch and eval reward per step) at the end of the run."""
    save_rollouts_every: int = 0
    """Every N steps write the step's episodes to ``rollouts/step-<N>.jsonl`` (``coa view``
    opens the run); a step that raises an alarm is written whatever N is. 0 = alarms only."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.save_rollouts_every < 0:
            raise ConfigError("bookkeeping.save_rollouts_every must be >= 0 (0 = only the steps "
                              "that raise an alarm)")
        if self.eval_every < 0 or self.eval_episodes < 1:
            raise ConfigError("bookkeeping.eval_every must be >= 0 (0 = off) and "
                              "bookkeeping.eval_episodes >= 1")


@dataclass
class RLConfig:
    """Everything one RL run needs, in sections. Load with :func:`load_config`."""

    algorithm: AlgorithmSection = field(default_factory=AlgorithmSection)
    """PPO / GRPO / DAPO: advantages, loss, optimiser, batch shape, DAPO's extras."""
    model: ModelSection = field(default_factory=ModelSection)
    """The policy: where it comes from, its dtype, an optional SFT warm start."""
    env: EnvSection = field(default_factory=EnvSection)
    """The gymnasium env episodes run in (and the eval env)."""
    rollout: RolloutSection = field(default_factory=RolloutSection)
    """Sampling: engine, token budgets, temperature, concurrency, fault tolerance."""
    resources: ResourcesSection = field(default_factory=ResourcesSection)
    """Ray, GPUs, workers, learner ranks, memory knobs."""
    bookkeeping: RLBookkeeping = field(default_factory=RLBookkeeping)
    """Run directory, checkpoints, resume, eval, plots."""
    health: HealthSection = field(default_factory=HealthSection)
    """Rollout-health metrics and alarms (entropy collapse, reward rising while held-out
    falls, format violations rising, ...)."""

    def __post_init__(self) -> None:
        check_fields(self)
        algo, rollout, res, book = self.algorithm, self.rollout, self.resources, self.bookkeeping
        if not algo.overlong_buffer < rollout.max_response_tokens:
            raise ConfigError(f"algorithm.overlong_buffer={algo.overlong_buffer} must be below "
                              f"rollout.max_response_tokens={rollout.max_response_tokens}")
        if algo.minibatch_size > self.episodes_per_step:
            raise ConfigError(
                f"algorithm.minibatch_size={algo.minibatch_size} exceeds the batch "
                f"({self.episodes_per_step} episodes = prompts_per_step * group_size)")
        if res.micro_batch_size > algo.minibatch_size:
            raise ConfigError(f"resources.micro_batch_size={res.micro_batch_size} must be <= "
                              f"algorithm.minibatch_size={algo.minibatch_size}")
        if book.eval_every and self.env.train_split != "train":
            where = "env.envs[].env_kwargs" if self.env.envs else "env.kwargs"
            raise ConfigError(f"{where}.task_options.split={self.env.train_split!r}: the "
                              "periodic eval scores the held-out tasks (split=test), which must "
                              "not be trained on; train on split=train or set "
                              "bookkeeping.eval_every=0")
        if self.model.warm_start.episodes and self.model.init_checkpoint:
            raise ConfigError("model.warm_start trains the starting weights itself: drop "
                              "model.init_checkpoint (or set model.warm_start.episodes=0)")
        wanted = (res.learner_gpus * res.learner_workers
                  + res.rollout_gpus_per_worker * res.num_rollout_workers)
        if wanted > res.num_gpus + 1e-9:
            raise ConfigError(f"resources: learner_gpus * learner_workers + "
                              f"rollout_gpus_per_worker * num_rollout_workers = {wanted:g} "
                              f"exceeds num_gpus={res.num_gpus}")
        if res.learner_workers > 1 and not res.use_ray:
            raise ConfigError("resources.learner_workers > 1 runs DDP ranks as Ray actors: "
                              "set resources.use_ray=true")
        if self.model.lora.enabled and res.learner_workers > 1 and res.learner_strategy == "fsdp":
            raise ConfigError("model.lora with resources.learner_strategy=fsdp is not supported "
                              "(adapters are small: use learner_strategy=ddp)")
        if rollout.agent and algo.max_staleness:
            raise ConfigError("rollout.agent plays each step's episodes to the end (the synchronous loop); set "
                              "algorithm.max_staleness=0 to train an external agent")
        if rollout.agent and self.env.url:
            raise ConfigError("rollout.agent plays the env's tasks in the rollout workers; it cannot use a served "
                              "env (env.url): drop one of them")
        if rollout.engine == "vllm" and res.num_gpus == 0:
            raise ConfigError("rollout.engine=vllm needs resources.num_gpus >= 1; use hf on CPU")

    # -- derived -----------------------------------------------------------------------
    @property
    def uses_critic(self) -> bool:
        return self.algorithm.name == "ppo"

    @property
    def uses_reference(self) -> bool:
        return self.algorithm.kl_coef > 0 or self.health.kl_to_reference

    @property
    def episodes_per_step(self) -> int:
        return self.algorithm.prompts_per_step * self.algorithm.group_size

    # -- io ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")


def _resolve_presets(data: dict[str, Any]) -> dict[str, Any]:
    """Fill the chosen algorithm's preset into the ``algorithm`` keys the user left out."""
    data = moved_model_keys(data)
    env = data.get("env")
    if isinstance(env, dict) and env.get("envs") and ({"id", "kwargs"} & set(env)):
        raise ConfigError("env.envs names each env with its env_kwargs: drop env.id and "
                          "env.kwargs (or drop env.envs to train on one env)")
    rollout_section = data.get("rollout")
    if isinstance(rollout_section, dict) and "pipeline" in rollout_section:
        raise ConfigError("rollout.pipeline is now algorithm.max_staleness: pipeline: true was "
                          "one step off-policy, i.e. algorithm.max_staleness: 1 (drop "
                          "rollout.pipeline)")
    algo = data.get("algorithm", {})
    if isinstance(algo, str):
        raise ConfigError(f"algorithm is a section: write `algorithm: {{name: {algo}}}` "
                          f"(or algorithm.name={algo})")
    if not isinstance(algo, dict):
        return data  # build_section reports the shape error
    name = algo.get("name", AlgorithmSection.name)
    if name not in PRESETS:
        raise ConfigError(f"algorithm.name={name!r}: choose one of {', '.join(sorted(PRESETS))}")
    preset = dict(PRESETS[name])
    if name == "dapo":
        rollout = data.get("rollout") if isinstance(data.get("rollout"), dict) else {}
        preset["overlong_buffer"] = int(rollout.get("max_response_tokens",
                                                    RolloutSection.max_response_tokens)) // 4
    resolved = {**preset, **algo}
    resolved.setdefault("critic_lr", resolved.get("lr", AlgorithmSection.lr))
    return {**data, "algorithm": resolved}


# Where each key of the flat layout (before sections) lives now.
_MOVED_TO = {
    "algorithm": ("total_steps", "prompts_per_step", "group_size", "lr", "critic_lr",
                  "weight_decay", "max_grad_norm", "ppo_epochs", "minibatch_size",
                  "clip_eps_low", "clip_eps_high", "loss_agg", "entropy_coef", "kl_coef",
                  "kl_estimator", "group_std_norm", "critic", "gamma", "lam", "value_clip",
                  "vf_coef", "whiten_advantages", "dynamic_sampling", "max_sampling_rounds",
                  "overlong_buffer", "overlong_penalty"),
    "model": ("init_checkpoint", "warm_start", "dtype", "gradient_checkpointing"),
    "env": ("max_turns",),
    "rollout": ("max_new_tokens", "max_response_tokens", "temperature", "top_p",
                "episodes_in_flight", "tool_threads", "max_episode_retries",
                "worker_restart_timeout_s"),
    "resources": ("use_ray", "ray_address", "num_rollout_workers", "num_gpus",
                  "learner_workers", "learner_gpus", "rollout_gpus_per_worker",
                  "cpus_per_worker", "torch_threads", "micro_batch_size"),
    "bookkeeping": ("eval_every", "eval_episodes", "output_dir", "save_every",
                    "keep_checkpoints", "seed", "tensorboard", "plot", "resume"),
}
MOVED: dict[str, str] = {old: f"{section}.{old}" for section, olds in _MOVED_TO.items()
                         for old in olds}
MOVED.update({"model_config": "model.tiny", "env_id": "env.id",
              "env_kwargs": "env.kwargs", "rollout_engine": "rollout.engine",
              "rollout_timeout_s": "rollout.timeout_s"})


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                values: dict[str, Any] | None = None) -> RLConfig:
    """A config from a YAML file (optional), ``values`` (nested or dotted keys) and
    ``key=value`` overrides, with the algorithm's preset filled in."""
    return _load(RLConfig, path, overrides, values, resolve=_resolve_presets, moved=MOVED)
