"""The recipe's configuration: one dataclass, loaded from YAML, overridable by ``key=value``.

A recipe is the CoA pipeline on one real model and one task: baseline eval -> teacher runs on
training tasks -> distillation -> masked SFT -> RL from the SFT model -> held-out eval after
each stage -> report. The task's settings (``env_id``, ``env_options``, ``max_turns``,
``max_new_tokens``) are written once and used by every stage, so the teacher, the SFT data,
RL and every eval see the same prompt, tools and budgets; only ``split`` differs (``train``
for the teacher and RL, ``test`` for the evals). ``sft`` and ``rl`` hold trainer settings
(``SFTConfig`` / ``RLConfig`` sections); the recipe fills in what it owns (model, data, env,
output directories). Loaded by the trainers' one config loader (``trainers.common.config``).
Stdlib + PyYAML only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainers.common.config import ConfigError, check_fields, load_config

__all__ = ["EvalSet", "RecipeConfig", "load_recipe"]

# Trainer keys the recipe sets itself (from model, env_id, env_options, max_turns, ...).
_OWNED_SFT = ("model.path", "data.train_path", "bookkeeping.output_dir")
_OWNED_RL = ("model.path", "model.init_checkpoint", "env.id", "env.kwargs", "env.max_turns",
             "rollout.max_new_tokens", "resources.use_ray", "bookkeeping.output_dir")


def _has(mapping: dict[str, Any], dotted: str) -> bool:
    node: Any = mapping
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@dataclass
class EvalSet:
    """A further held-out eval run after each stage (e.g. a transfer check on another env)."""

    name: str
    env_id: str
    n: int
    """Tasks (the first ``n`` of ``split``)."""
    split: Literal["test", "all"] = "test"
    """``all`` only for an env no stage trains on (every task is then held out)."""
    env_options: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 4
    max_new_tokens: int = 48

    def __post_init__(self) -> None:
        check_fields(self, f"transfer.{self.name}.")
        if self.split not in ("test", "all"):
            raise ValueError(f"eval set {self.name!r}: split={self.split!r}; use test (or all for "
                             "an env no stage trains on)")
        if self.n < 1 or self.max_turns < 1 or self.max_new_tokens < 1:
            raise ValueError(f"eval set {self.name!r}: n, max_turns and max_new_tokens must be >= 1")


@dataclass
class RecipeConfig:
    """Every setting of one recipe run (see the module docstring)."""

    # -- model ------------------------------------------------------------------------
    model: str = "smollm2-135m"
    """Catalogue name, HF directory or hub id of the model the recipe starts from."""

    # -- the task every stage uses -----------------------------------------------------
    env_id: str = "coa/SynthHop-v0"
    env_options: dict[str, Any] = field(default_factory=dict)
    """``gym.make`` options shared by every stage (task options, tools, system prompt); the
    recipe sets ``task_options.split`` per stage."""
    max_turns: int = 3
    max_new_tokens: int = 48
    """Tokens the model may generate in one turn (evals and RL alike)."""
    heldout_tasks: int = 40
    """Held-out tasks of the primary eval (the first N of ``split: test``)."""

    # -- evaluation -------------------------------------------------------------------
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    """Sampling seeds of every eval: each (task, seed) is one episode."""
    temperature: float = 1.0
    """Eval sampling temperature (RL samples at its own ``rl.temperature``)."""
    concurrency: int = 16
    """Episodes in flight in an eval (batched into shared forward passes)."""
    transfer: list[EvalSet | dict[str, Any]] = field(default_factory=list)
    """Further eval sets run after every stage (each with ``seeds``)."""

    # -- teacher and distillation -----------------------------------------------------
    teacher_agent: str = "oracle"
    """``coa eval --agent`` of the teacher (oracle, MODULE:NAME, ...) on the training tasks."""
    teacher_tasks: int = 160
    teacher_samples: int = 1
    distill_max_per_task: int = 1

    # -- training ---------------------------------------------------------------------
    sft: dict[str, Any] = field(default_factory=dict)
    """SFTConfig sections (``optim``, ``data``, ...); full fine-tuning unless ``model.lora``."""
    rl: dict[str, Any] = field(default_factory=dict)
    """RLConfig sections (``algorithm``, ``rollout``, ``bookkeeping.eval_every``, ...)."""
    rl_reward: dict[str, Any] = field(default_factory=dict)
    """Reward options for RL's training episodes only (e.g. ``{metric: f1}``: partial credit);
    every eval, RL's periodic one included, scores with the env's own reward."""
    torch_threads: int = 2
    """CPU threads of every stage's torch (OMP_NUM_THREADS of the eval processes)."""

    # -- targets (reported as met or not; they never change what is measured) --------
    target_sft_gain: float = 0.30
    target_rl_gain: float = 0.05
    target_minutes: float = 60.0

    output_dir: str = "runs/recipe"

    def __post_init__(self) -> None:
        self.transfer = [t if isinstance(t, EvalSet) else EvalSet(**t) for t in self.transfer]
        check_fields(self)
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError("seeds must be a non-empty list of distinct integers")
        if self.temperature <= 0 and len(self.seeds) > 1:
            raise ValueError("temperature=0 (greedy) makes every seed give the same episodes: "
                             "use temperature > 0 or one seed")
        for name in ("max_turns", "max_new_tokens", "heldout_tasks", "concurrency",
                     "teacher_tasks", "teacher_samples", "torch_threads"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1")
        if "split" in dict(self.env_options.get("task_options") or {}):
            raise ValueError("env_options.task_options.split is set per stage by the recipe "
                             "(train for the teacher and RL, test for the evals): remove it")
        owned = [f"sft.{k}" for k in _OWNED_SFT if _has(self.sft, k)]
        owned += [f"rl.{k}" for k in _OWNED_RL if _has(self.rl, k)]
        if owned:
            raise ValueError(f"{owned} are set by the recipe from model, env_id, env_options, "
                             "max_turns, max_new_tokens, rl_reward and output_dir: remove them")
        names = [t.name for t in self.transfer]
        if "primary" in names or len(set(names)) != len(names):
            raise ValueError("transfer eval sets need distinct names other than 'primary'")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_recipe(path: str | Path | None = None, overrides: list[str] | None = None) -> RecipeConfig:
    """YAML file (optional) then ``key=value`` overrides (dotted keys reach into mappings)."""
    try:
        return load_config(RecipeConfig, path, overrides)
    except TypeError as error:  # e.g. a transfer entry with a missing or unknown key
        raise ConfigError(str(error)) from error
