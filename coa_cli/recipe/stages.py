"""The recipe's stages as ``coa`` command lines, and the runner that skips finished ones.

Each stage is what a user would type: ``coa eval`` (baseline and the evals after SFT and RL),
``coa eval --agent TEACHER --split train`` (the teacher, per trained env), ``coa distill``,
``coa train sft``, ``coa filter-tasks`` (RL's pool: training tasks the SFT model solves
sometimes, never all or none of the time), ``coa train rl`` (on the pools' tasks, a mixture
of the trained envs). They run as child processes, one at a time, each logging to
``<out>/<stage>/log.txt``; a crash ends the recipe with the log's tail, never a half report.

Running them (skipping finished ones, resuming interrupted ones) is :mod:`coa_cli.recipe.runner`.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from coa_cli.recipe.config import EvalSet, RecipeConfig
from trainers.common.config import deep_merge

__all__ = ["EVAL_STAGES", "Stage", "adapter_path", "env_args", "eval_runs", "eval_sets", "plan", "pool_path",
           "trained_sets"]

# stage name -> the model it evaluates (a recipe key or a stage's output)
EVAL_STAGES = ("baseline", "sft_eval", "rl_eval")


@dataclass
class Stage:
    name: str
    commands: list[list[str]]
    """``coa`` argument lists, run in order."""
    depends: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    """Config files (path relative to the stage directory -> text) written before running."""
    resumable: bool = True
    """False: an interrupted run starts over in an empty directory."""
    lanes: tuple[str, ...] = ()
    """The lane of each command (the env it plays): commands of different lanes may run at
    the same time, those of one lane run in order. Empty: one lane. Not part of the
    fingerprint (how commands are scheduled changes no result)."""

    @property
    def fingerprint(self) -> str:
        payload = json.dumps({"commands": self.commands, "files": self.files}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def shell(self) -> list[str]:
        return [shlex.join(["coa", *command]) for command in self.commands]


def _flatten(options: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in options.items():
        if isinstance(value, dict) and value:
            items.extend(_flatten(value, f"{prefix}{key}."))
        else:
            items.append((f"{prefix}{key}", value))
    return items


def env_args(options: dict[str, Any]) -> list[str]:
    """``gym.make`` options as ``coa eval -e key=value`` (JSON values are valid YAML)."""
    return [arg for key, value in _flatten(options) for arg in ("-e", f"{key}={json.dumps(value)}")]


@dataclass(frozen=True)
class EvalRun:
    """One ``coa eval`` of an eval stage: which set, which seed, where it writes."""

    stage: str
    set_name: str
    seed: int
    out: Path


def _primary(config: RecipeConfig) -> EvalSet:
    """The primary task as an env of the recipe (trained on, weight = what the others leave)."""
    return EvalSet(name="primary", env_id=config.env_id, n=config.heldout_tasks, split="test",
                   env_options=config.env_options, max_turns=config.max_turns,
                   max_new_tokens=config.max_new_tokens, teacher_tasks=config.teacher_tasks,
                   weight=1.0 - sum(t.weight for t in config.trained),
                   sft_weight=1.0 - sum(float(t.sft_weight or 0.0) for t in config.trained))


def eval_sets(config: RecipeConfig) -> list[EvalSet]:
    return [_primary(config), *config.envs]


def trained_sets(config: RecipeConfig) -> list[EvalSet]:
    """Every env the recipe trains on: the primary first, then the ``train: true`` ones."""
    return [_primary(config), *config.trained]


def eval_runs(config: RecipeConfig, out: Path, stage: str) -> list[tuple[EvalRun, EvalSet]]:
    return [(EvalRun(stage, s.name, seed, out / stage / s.name / f"seed{seed}"), s)
            for s in eval_sets(config) for seed in config.seeds]


def pool_path(out: Path, name: str) -> Path:
    """Where ``coa filter-tasks`` writes an env's pool (its report: ``.report.json`` beside)."""
    return out / "pool" / f"{name}.jsonl"


def _eval_stage(config: RecipeConfig, out: Path, name: str, model: str, depends: tuple[str, ...]) -> Stage:
    commands, lanes = [], []
    for run, spec in eval_runs(config, out, name):
        lanes.append(spec.name)
        commands.append([
            "eval", spec.env_id, "--agent", "llm", "--model", model, "--split", spec.split,
            "--n", str(spec.n), "--seed", str(run.seed), "--temperature", str(config.temperature),
            "--max-new-tokens", str(spec.max_new_tokens), "--max-turns", str(spec.max_turns),
            "--concurrency", str(config.concurrency), "--out", str(run.out), "--resume",
            "--no-plots", "--no-progress", *env_args(spec.env_options)])
    return Stage(name, commands, depends, lanes=tuple(lanes))


def _own_reward(config: RecipeConfig) -> dict[str, Any]:
    """The env's reward with every key ``rl_reward`` changes spelled out (eval kwargs are merged
    over the training ones, so a key left out would keep the training value)."""
    import inspect
    from importlib import import_module

    from coa_envs.registry import entry

    own = deep_merge(entry(config.env_id).get("reward") or {}, config.env_options.get("reward") or {})
    build = import_module(f"coa_envs.rewards.{own.get('name')}").build
    defaults = {k: p.default for k, p in inspect.signature(build).parameters.items()
                if p.default is not inspect.Parameter.empty}
    for key in config.rl_reward:
        if key not in own:
            if key not in defaults:
                raise ValueError(f"rl_reward.{key}: the {own.get('name')} reward has no default to "
                                 f"restore for the evals; set env_options.reward.{key} too")
            own[key] = defaults[key]
    return own


def _train_options(spec: EvalSet) -> dict[str, Any]:
    return {**spec.env_options, "task_options": {**dict(spec.env_options.get("task_options") or {}),
                                                 "split": "train"}}


def _teacher_stages(config: RecipeConfig, out: Path) -> list[Stage]:
    teach, distill = [], []
    for spec in trained_sets(config):
        teacher_dir = out / "teacher" / spec.name
        teach.append(["eval", spec.env_id, "--agent", config.teacher_agent, "--split", "train",
                      "--n", str(spec.teacher_tasks), "--samples", str(config.teacher_samples),
                      "--max-turns", str(spec.max_turns), "--concurrency", str(config.concurrency),
                      "--out", str(teacher_dir), "--resume", "--no-plots", "--no-progress",
                      *env_args(spec.env_options)])
        # --env-kwargs: the teacher's env, so each episode is replayed against the same tasks
        distill.append(["distill", str(teacher_dir), "--out", str(out / "distill" / f"{spec.name}.jsonl"),
                        "--max-per-task", str(config.distill_max_per_task), "--env-kwargs",
                        json.dumps({**_train_options(spec), "max_turns": spec.max_turns})])
    lanes = tuple(spec.name for spec in trained_sets(config))
    return [Stage("teacher", teach, lanes=lanes), Stage("distill", distill, ("teacher",), lanes=lanes)]


def _pool_stage(config: RecipeConfig, out: Path, model: str) -> Stage:
    pool = config.pool
    commands = []
    for spec in trained_sets(config):
        commands.append([
            "filter-tasks", spec.env_id, "--model", model, "--samples", str(pool.samples),
            "--keep", pool.keep, "--n", str(pool.tasks), "--skip", str(spec.teacher_tasks),
            "--split", "train", "--temperature", str(_rl_temperature(config)),
            "--max-new-tokens", str(config.max_new_tokens), "--max-turns", str(spec.max_turns),
            "--concurrency", str(config.concurrency), "--seed", "0", "--resume", "--no-progress",
            "--out", str(pool_path(out, spec.name)), *env_args(spec.env_options)])
    return Stage("pool", commands, ("sft",), lanes=tuple(spec.name for spec in trained_sets(config)))


def _rl_temperature(config: RecipeConfig) -> float:
    return float(dict(config.rl.get("rollout") or {}).get("temperature", 1.0))


def _rl_env(config: RecipeConfig, out: Path) -> dict[str, Any]:
    """RL's env section: the primary env alone, or the mixture of every trained env; each
    plays only its pool's tasks when the recipe selects a pool."""
    sets = trained_sets(config)
    pooled = config.pool.tasks > 0
    if len(sets) == 1:
        rl_env: dict[str, Any] = {"id": config.env_id, "max_turns": config.max_turns,
                                  "kwargs": _train_options(sets[0])}
        if pooled:
            rl_env["task_list"] = str(pool_path(out, "primary"))
        if config.rl_reward:  # RL trains on this reward; its held-out eval keeps the env's own
            rl_env["kwargs"] = deep_merge(rl_env["kwargs"], {"reward": config.rl_reward})
            rl_env["eval_kwargs"] = {"reward": _own_reward(config)}
        return rl_env
    if config.rl_reward:
        raise ValueError("rl_reward changes the primary env's reward for one env only; with trained "
                         "envs (envs[].train) set each env's reward in its env_options")
    entries = []
    for spec in sets:
        kwargs = {**_train_options(spec), "max_turns": spec.max_turns}
        if pooled:
            kwargs["task_options"]["task_list"] = str(pool_path(out, spec.name))
        entries.append({"id": spec.env_id, "name": spec.name, "weight": round(spec.weight, 6),
                        "env_kwargs": kwargs})
    # the periodic held-out eval plays each env's test tasks: no training task list there
    return {"max_turns": config.max_turns, "envs": entries,
            "eval_kwargs": {"task_options": {"task_list": None}} if pooled else {}}


def _sft_data(config: RecipeConfig, out: Path) -> dict[str, Any]:
    sets = trained_sets(config)
    if len(sets) == 1:
        return {"train_path": str(out / "distill" / "primary.jsonl")}
    return {"envs": [{"id": s.env_id, "name": s.name, "weight": round(float(s.sft_weight or 0.0), 6),
                      "path": str(out / "distill" / f"{s.name}.jsonl")} for s in sets]}


def plan(config: RecipeConfig, out: Path) -> list[Stage]:
    """Every stage of the recipe, in order, with its commands and config files."""
    sft_dir, rl_dir = out / "sft", out / "rl"
    threads = {"resources": {"torch_threads": config.torch_threads}}
    sft_config = deep_merge(deep_merge({**threads, "bookkeeping": {"progress": False}}, config.sft), {
        "model": {"path": config.model}, "data": _sft_data(config, out),
        "bookkeeping": {"output_dir": str(sft_dir)}})
    rl_config = deep_merge(deep_merge({**threads, "rollout": {"temperature": 1.0}}, config.rl), {
        "model": {"path": str(sft_dir / "final")}, "env": _rl_env(config, out),
        "rollout": {"max_new_tokens": config.max_new_tokens}, "resources": {"use_ray": False},
        "bookkeeping": {"output_dir": str(rl_dir)}})
    pooled = config.pool.tasks > 0
    exported = config.export.rank > 0
    export_stage = Stage("export", [["export-adapter", str(rl_dir / "final"), "--base", config.model,
                                     "--rank", str(config.export.rank), "--dtype", config.export.dtype,
                                     "--out", str(adapter_path(out))]], ("rl",))
    return [
        _eval_stage(config, out, "baseline", config.model, ()),
        *_teacher_stages(config, out),
        Stage("sft", [["train", "sft", "--config", str(sft_dir / "sft.yaml")]], ("distill",),
              files={"sft.yaml": yaml.safe_dump(sft_config, sort_keys=False)}, resumable=False),
        _eval_stage(config, out, "sft_eval", str(sft_dir / "final"), ("sft",)),
        *([_pool_stage(config, out, str(sft_dir / "final"))] if pooled else []),
        Stage("rl", [["train", "rl", "--config", str(rl_dir / "rl.yaml"), "--resume"]],
              ("sft", "pool") if pooled else ("sft",),
              files={"rl.yaml": yaml.safe_dump(rl_config, sort_keys=False)}),
        *([export_stage] if exported else []),
        _eval_stage(config, out, "rl_eval", str(adapter_path(out) if exported else rl_dir / "final"),
                    ("export",) if exported else ("rl",)),
    ]


def adapter_path(out: Path) -> Path:
    """Where the export stage writes the final model as an adapter (the shipped form)."""
    return out / "export" / "adapter"
