"""The recipe's configuration: one dataclass, loaded from YAML, overridable by ``key=value``.

A recipe is the CoA pipeline on one real model: baseline eval -> teacher runs on training
tasks -> distillation -> masked SFT -> RL's task pool from the SFT model's pass rate -> RL
from the SFT model -> held-out eval after each stage -> report. The primary task's settings
(``env_id``, ``env_options``, ``max_turns``, ``max_new_tokens``) are written once and used by
every stage, so the teacher, the SFT data, the pool, RL and every eval see the same prompt,
tools and budgets; only ``split`` differs (``train`` for the teacher, the pool and RL,
``test`` for the evals). ``envs`` adds further envs: each is evaluated after every stage, and
those with ``train: true`` are trained on too (SFT and RL on the mixture, by ``weight``).
``sft`` and ``rl`` hold trainer settings (``SFTConfig`` / ``RLConfig`` sections); the recipe
fills in what it owns (model, data, env, output directories). Loaded by the trainers' one
config loader (``trainers.common.config``). Stdlib + PyYAML only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainers.common.config import ConfigError, check_fields, load_config

__all__ = ["EvalSet", "ExportSettings", "PoolSettings", "RecipeConfig", "load_recipe"]

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
    """A further env beside the primary one: evaluated on its held-out tasks after every stage;
    with ``train: true`` its training tasks also go to the teacher, SFT, the pool and RL."""

    name: str
    env_id: str
    n: int
    """Held-out tasks (the first ``n`` of ``split``)."""
    split: Literal["test", "all"] = "test"
    """``all`` only for an env no stage trains on (every task is then held out)."""
    env_options: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 4
    max_new_tokens: int = 48
    """Tokens per turn in its evals (RL samples every env with the primary's
    ``max_new_tokens``)."""
    train: bool = False
    """Train on it too: its teacher episodes join the SFT data, its pool joins RL's."""
    teacher_tasks: int = 0
    """Training tasks the teacher plays (the first N of ``split: train``); with ``train``."""
    weight: float = 0.0
    """Its share of RL's groups (the primary env gets the rest)."""
    sft_weight: float | None = None
    """Its share of SFT's packed rows (None: ``weight``); a row holds ~1024 tokens, so an env
    with long episodes needs a larger share than its share of episodes."""
    target_sft_gain: float | None = None
    """SFT − baseline this env must reach (reported as met or not); None: no target."""

    def __post_init__(self) -> None:
        check_fields(self, f"envs.{self.name}.")
        if self.split not in ("test", "all"):
            raise ValueError(f"eval set {self.name!r}: split={self.split!r}; use test (or all for "
                             "an env no stage trains on)")
        if self.n < 1 or self.max_turns < 1 or self.max_new_tokens < 1:
            raise ValueError(f"eval set {self.name!r}: n, max_turns and max_new_tokens must be >= 1")
        if self.sft_weight is None:
            self.sft_weight = self.weight
        if self.train and (self.split != "test" or self.teacher_tasks < 1 or not 0 < self.weight < 1
                           or not 0 < self.sft_weight < 1):
            raise ValueError(f"env {self.name!r} has train: true: it needs split: test (its held-out "
                             "side), teacher_tasks >= 1 and weight (and sft_weight) in (0, 1)")
        if "split" in dict(self.env_options.get("task_options") or {}):
            raise ValueError(f"envs.{self.name}.env_options.task_options.split is set per stage by "
                             "the recipe: remove it")


@dataclass
class PoolSettings:
    """RL's task pool: ``coa filter-tasks`` samples the SFT model on training tasks it was not
    taught and keeps those whose pass rate is in ``keep`` (the seed's practice): a task the
    model always or never solves gives a group with one reward and no gradient."""

    tasks: int = 0
    """Candidate training tasks per trained env, taken after the teacher's; 0 = no pool (RL
    trains on every training task)."""
    samples: int = 4
    """Samples per candidate (K); the pass rate is solved / K."""
    keep: str = "0.25-0.75"
    """The pass-rate band kept, LOW-HIGH inclusive (``coa filter-tasks --keep``)."""

    def __post_init__(self) -> None:
        check_fields(self, "pool.")
        low, sep, high = self.keep.partition("-")
        try:
            band = (float(low), float(high)) if sep else None
        except ValueError:
            band = None
        if band is None or not 0.0 <= band[0] <= band[1] <= 1.0:
            raise ValueError(f"pool.keep={self.keep!r}: write LOW-HIGH with 0 <= LOW <= HIGH <= 1")
        if self.tasks < 0 or self.samples < 2:
            raise ValueError("pool.tasks must be >= 0 and pool.samples >= 2 (a pass rate needs samples)")

    @property
    def band(self) -> tuple[float, float]:
        low, _, high = self.keep.partition("-")
        return float(low), float(high)


@dataclass
class ExportSettings:
    """The shipped form of the final model: ``coa export-adapter`` factors RL's model minus the
    base into a LoRA adapter (:mod:`trainers.lowrank`); the RL eval scores that adapter, so
    the report's RL figures are the shipped agent's."""

    rank: int = 8
    """Adapter rank; 0 = no export (the RL eval scores RL's own output)."""
    dtype: Literal["float16", "bfloat16", "float32"] = "float16"

    def __post_init__(self) -> None:
        check_fields(self, "export.")
        if self.rank < 0:
            raise ValueError("export.rank must be >= 0 (0 = no export)")


@dataclass
class RecipeConfig:
    """Every setting of one recipe run (see the module docstring)."""

    # -- model ------------------------------------------------------------------------
    model: str = "smollm2-135m"
    """Catalogue name, HF directory or hub id of the model the recipe starts from."""

    # -- the task every stage uses -----------------------------------------------------
    env_id: str = "coa/SynthHop-v1"
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
    envs: dict[str, Any] | list[EvalSet | dict[str, Any]] = field(default_factory=list)
    """Further envs by name (``{miniweb: {env_id: ..., n: ...}}``, so ``envs.miniweb.n=4``
    overrides one setting), each evaluated after every stage (with ``seeds``); ``train: true``
    ones are trained on too (a mixture with the primary env, by ``weight``). Loaded as a list
    of :class:`EvalSet`."""

    # -- teacher and distillation -----------------------------------------------------
    teacher_agent: str = "oracle"
    """``coa eval --agent`` of the teacher (oracle, MODULE:NAME, ...) on the training tasks,
    e.g. ``agents.teachers.scripted:ScriptedTeam`` (plan, reflection and double-check spans)."""
    teacher_tasks: int = 160
    """Primary training tasks the teacher plays (the first N of ``split: train``)."""
    teacher_samples: int = 1
    distill_max_per_task: int = 1

    # -- RL's task pool ---------------------------------------------------------------
    pool: PoolSettings | dict[str, Any] = field(default_factory=PoolSettings)
    """Which training tasks RL plays, chosen by the SFT model's pass rate."""
    export: ExportSettings | dict[str, Any] = field(default_factory=ExportSettings)
    """The final model as a small adapter (what ships as a trained agent)."""

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
    parallel_lanes: int = 2
    """Commands of one stage that play different envs run at once, up to this many (each a
    ``torch_threads`` process); commands of one env run in order. 1 runs everything in order."""

    # -- targets (reported as met or not; they never change what is measured) --------
    target_sft_gain: float = 0.30
    """SFT − baseline on the primary task's held-out tasks (mean of the paired gain)."""
    target_rl_gain: float = 0.10
    """RL − SFT on the primary task, with its 95% interval above 0; on every other env RL
    must not fall below SFT (mean paired gain >= 0)."""
    target_minutes: float = 60.0

    output_dir: str = "runs/recipe"

    def __post_init__(self) -> None:
        if isinstance(self.envs, dict):
            for name, spec in self.envs.items():
                if not isinstance(spec, dict):
                    raise ValueError(f"envs.{name} must be a mapping of EvalSet settings, not {spec!r}")
            self.envs = [{**spec, "name": name} for name, spec in self.envs.items()]
        self.envs = [t if isinstance(t, EvalSet) else EvalSet(**t) for t in self.envs]
        self.pool = self.pool if isinstance(self.pool, PoolSettings) else PoolSettings(**self.pool)
        self.export = self.export if isinstance(self.export, ExportSettings) else ExportSettings(**self.export)
        check_fields(self)
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError("seeds must be a non-empty list of distinct integers")
        if self.temperature <= 0 and len(self.seeds) > 1:
            raise ValueError("temperature=0 (greedy) makes every seed give the same episodes: "
                             "use temperature > 0 or one seed")
        for name in ("max_turns", "max_new_tokens", "heldout_tasks", "concurrency",
                     "teacher_tasks", "teacher_samples", "torch_threads", "parallel_lanes"):
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
        names = [t.name for t in self.envs]
        if "primary" in names or len(set(names)) != len(names):
            raise ValueError("envs need distinct names other than 'primary'")
        for key in ("weight", "sft_weight"):
            total = sum(getattr(t, key) for t in self.trained)
            if total >= 1.0:
                raise ValueError(f"the {key}s of the trained envs must sum below 1 (the primary env "
                                 "gets the rest)")

    @property
    def trained(self) -> list[EvalSet]:
        """The further envs trained on (``train: true``), in order."""
        return [t for t in self.envs if isinstance(t, EvalSet) and t.train]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_recipe(path: str | Path | None = None, overrides: list[str] | None = None) -> RecipeConfig:
    """YAML file (optional) then ``key=value`` overrides (dotted keys reach into mappings)."""
    try:
        return load_config(RecipeConfig, path, overrides)
    except TypeError as error:  # e.g. an envs entry with a missing or unknown key
        raise ConfigError(str(error)) from error
