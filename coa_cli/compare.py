"""``coa compare``: several models on the same held-out tasks, scored side by side.

``coa compare --recipe examples/recipe_smollm2_cpu.yaml --model smollm2-135m --model
smollm2-135m-coa --n 10 --out runs/compare`` plays each model on the first N held-out tasks of
the recipe's primary env (``--set NAME`` adds one of its further envs), with the recipe's
prompt, tools, budgets and temperature, one sampling seed for all models, so every model meets
the same tasks and the same draws of randomness where their choices agree. Each run is an
ordinary ``coa eval`` directory (``OUT/<set>/<model>``, which ``coa view`` shows: spans and
tool calls), and the command ends with one table per env: a column per model and the tasks
each solved. ``ENV_ID`` with ``-e`` options instead of ``--recipe`` compares on any env.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import typer

from coa_cli.options import DEVICE, DTYPE, ENV_OPTION
from coa_envs.process_pools import kill_pool, owned_pool

__all__ = ["compare_command"]


def _label(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(model).name if "/" in model else model) or "model"


def _sets(recipe: Path | None, env_id: str | None, names: list[str], options: list[str],
          max_turns: int | None, max_new_tokens: int | None) -> tuple[list[dict[str, Any]], float | None]:
    """``[{name, env_id, options, max_turns, max_new_tokens}]`` to play, and the recipe's temperature."""
    if recipe is None:
        if env_id is None:
            raise typer.BadParameter("give ENV_ID or --recipe", param_hint="ENV_ID")
        return [{"name": env_id.split("/")[-1], "env_id": env_id, "options": options,
                 "max_turns": max_turns, "max_new_tokens": max_new_tokens or 512}], None
    from coa_cli.recipe.config import load_recipe
    from coa_cli.recipe.stages import env_args, eval_sets

    config = load_recipe(recipe)
    by_name = {s.name: s for s in eval_sets(config)}
    unknown = sorted(set(names) - set(by_name))
    if unknown:
        raise typer.BadParameter(f"{unknown} are not eval sets of {recipe}; choose from {sorted(by_name)}",
                                 param_hint="--set")
    chosen = [by_name["primary"], *[by_name[n] for n in names if n != "primary"]]
    return [{"name": s.name, "env_id": s.env_id,
             "options": [a for a in env_args(s.env_options) if a != "-e"] + options,
             "max_turns": max_turns or s.max_turns, "max_new_tokens": max_new_tokens or s.max_new_tokens}
            for s in chosen], config.temperature


def compare_command(
    env_id: str | None = typer.Argument(None, help="A registered id (or use --recipe)."),
    model: list[str] = typer.Option(..., "--model", "-m", help="A model to play (repeat: two or more); "
                                                                 "a catalogue name such as smollm2-135m-coa, "
                                                                 "a directory or an adapter directory."),
    recipe: Path | None = typer.Option(None, exists=True, dir_okay=False,
                                       help="Take env, prompt, tools, budgets and temperature from this "
                                            "recipe YAML (its primary env)."),
    eval_set: list[str] = typer.Option([], "--set", help="With --recipe: also play this eval set (repeatable)."),
    n: int = typer.Option(10, help="Held-out tasks per env (the first N of the test split)."),
    seed: int = typer.Option(0, help="Sampling seed, the same for every model."),
    temperature: float | None = typer.Option(None, help="Sampling temperature (default: the recipe's, else 1.0)."),
    max_turns: int | None = typer.Option(None, help="Turn limit (default: the recipe's, else the env's)."),
    max_new_tokens: int | None = typer.Option(None, help="Tokens per turn (default: the recipe's, else 512)."),
    env_option: list[str] = ENV_OPTION,
    concurrency: int = typer.Option(10, help="Episodes in flight per model."),
    device: str = DEVICE,
    dtype: str = DTYPE,
    out: Path = typer.Option(Path("runs/compare"), help="Output directory (a coa eval run per env and model)."),
    jobs: int = typer.Option(0, help="Models played at once, each in a process of its own (0: on the CPU one "
                                     "per model, at most one per CPU, on a GPU 1; 1: one after another in this "
                                     "process). Every model is loaded at once: mind the memory."),
) -> None:
    """Play every --model on the same held-out tasks and print their scores side by side."""
    from agents.report import load_run
    from coa_cli.run_output import metric_table

    if len(model) < 2:
        raise typer.BadParameter("give two or more --model to compare", param_hint="--model")
    sets, recipe_temperature = _sets(recipe, env_id, list(eval_set or []), list(env_option or []), max_turns,
                                     max_new_tokens)
    temperature = temperature if temperature is not None else (recipe_temperature or 1.0)
    labels = [_label(m) for m in model]
    if len(set(labels)) != len(labels):
        raise typer.BadParameter(f"two models share an output name: {labels}", param_hint="--model")
    summary: dict[str, Any] = {"seed": seed, "temperature": temperature, "n": n, "sets": {}}
    if jobs <= 0:  # models sharing one GPU would hold its memory all at once
        jobs = min(len(model), _cpus()) if device == "cpu" else 1
    jobs = min(jobs, len(model))
    for spec in sets:
        plays = []
        for name, label in zip(model, labels, strict=True):
            directory = out / spec["name"] / label
            typer.echo(f"[compare] {spec['env_id']}: {name} on {n} held-out tasks -> {directory}")
            plays.append(dict(
                env_id=spec["env_id"], agent="llm", model=name, engine="hf", base_url=None, api_key=None,
                api_mode="completions", server_extensions=True, tokenizer=None, device=device, dtype=dtype,
                temperature=temperature, top_p=1.0, max_new_tokens=spec["max_new_tokens"], system_prompt=None, n=n,
                samples=1, concurrency=concurrency, out=directory, resume=False, data=None, env_url=None,
                split="test", env_option=spec["options"], max_turns=spec["max_turns"], protocol=None,
                max_tool_calls=50, episode_timeout=600.0, selector="majority", judge_url=None, judge_model=None,
                seed=seed, plots=False, progress=False, table=False))
        _play_all(plays, jobs)
        runs = []
        for play, label in zip(plays, labels, strict=True):
            run = load_run(play["out"])
            run.label = label
            runs.append(run)
        rows = _solved_rows(runs)
        metric_table(f"{spec['env_id']} · the same {n} held-out tasks · seed {seed} · temperature {temperature:g}",
                     [("accuracy", [f"{r.summary.get('accuracy', 0.0):.3f}" for r in runs]), *rows,
                      *[(k, v) for k, v in _context_rows(runs)]], labels)
        summary["sets"][spec["name"]] = {label: {"accuracy": r.summary.get("accuracy"), "dir": str(r.path)}
                                         for label, r in zip(labels, runs, strict=True)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    typer.echo(f"[compare] see the episodes (spans, tool calls): coa view {out / sets[0]['name'] / labels[-1]}")


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _play(arguments: dict[str, Any]) -> None:
    from coa_cli.eval import eval_command

    eval_command(**arguments)


def _threads_per_process(processes: int) -> None:
    """Each model's process takes its share of the CPUs unless the user fixed the threads."""
    if "OMP_NUM_THREADS" not in os.environ:
        import torch

        torch.set_num_threads(max(1, _cpus() // processes))


def _play_all(plays: list[dict[str, Any]], jobs: int) -> None:
    """Every model's eval run, ``jobs`` at a time. The models share nothing, so a process each
    (spawned: no forked torch state) plays them side by side; with one job they play in turn
    here. Each run keeps its own seed; with the torch threads fixed (``OMP_NUM_THREADS``) the
    episodes do not depend on ``jobs``. The first model that fails stops the others and fails
    the comparison with its own error; a process that died outright is named."""
    if jobs <= 1:
        for arguments in plays:
            _play(arguments)
        return
    pool = owned_pool(jobs, get_context("spawn"), initializer=_threads_per_process, initargs=(jobs,))
    futures = {pool.submit(_play, arguments): arguments["model"] for arguments in plays}
    try:
        for done in as_completed(futures):
            try:
                done.result()
            except BrokenProcessPool as exc:
                raise RuntimeError(f"the process playing {futures[done]} died (out of memory?); "
                                   "--jobs 1 plays the models one after another") from exc
    except BaseException:
        kill_pool(pool)
        raise
    pool.shutdown()


def _solved_rows(runs: list[Any]) -> list[tuple[str, list[str]]]:
    solved = [{t.task_id for t in r.trajectories if t.reward >= 1.0} for r in runs]
    return [("tasks solved", [f"{len(s)} of {len({t.task_id for t in r.trajectories})}"
                              for s, r in zip(solved, runs, strict=True)])]


def _context_rows(runs: list[Any]) -> list[tuple[str, list[str]]]:
    from agents.report import comparison_rows

    keep = ("mean_turns", "tool_calls_per_episode", "status_counts", "wall_s")
    return [(key, values) for key, values in comparison_rows(runs) if key in keep]
