"""``coa filter-tasks``: keep the training tasks a model neither always solves nor always fails.

The paper's RL data step: sample the current model K times on every training task and keep
the tasks whose pass rate falls in a band (``--keep 0.1-0.9``). A task solved every time or
never gives a GRPO/DAPO group with one reward for all samples: no advantage, no gradient.
``coa filter-tasks ENV --model M -k K --keep LO-HI --out tasks.jsonl`` plays the tasks with
the same runner and policy as ``coa eval`` (``--split train`` by default), counts a sample
solved when its primary reward term reaches ``--threshold``, prints how many tasks fall in
each band, and writes

* ``OUT``: the kept tasks, one JSON line each (``task_id``, ``pass_rate``, ``solved``,
  ``samples``, ``question``, ``gold``), which any env takes as
  ``task_options={"task_list": OUT}`` (and the RL config as its training task list);
* ``OUT`` with ``.report.json``: the bands, the histogram of solved counts and every task's
  count, so nothing measured is lost;
* ``OUT`` with ``.trajectories.jsonl``: the sampled episodes (``--resume`` continues them).

Episodes that ended in an error (an engine failure, a timeout) are left out of their task's
pass rate rather than counted as failures; a task with no valid sample is ``unscored``.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from coa_cli import options as shared  # the options coa eval, filter-tasks and teach share
from coa_cli.options import env_options, flag_errors, progress_wanted

__all__ = ["BANDS", "band_of", "filter_tasks_command", "parse_keep"]

BANDS = ("never solved", "below band", "kept", "above band", "always solved", "unscored")


def parse_keep(text: str) -> tuple[float, float]:
    """``"0.1-0.9"`` -> ``(0.1, 0.9)``: the inclusive pass-rate band to keep."""
    low, sep, high = text.partition("-")
    try:
        band = (float(low), float(high)) if sep else None
    except ValueError:
        band = None
    if band is None or not 0.0 <= band[0] <= band[1] <= 1.0:
        raise typer.BadParameter(f"{text!r} is not a band; write LOW-HIGH with 0 <= LOW <= HIGH <= 1, "
                                 "e.g. 0.1-0.9", param_hint="--keep")
    return band


def band_of(solved: int, samples: int, keep: tuple[float, float]) -> str:
    """Which of :data:`BANDS` a task with ``solved`` of ``samples`` falls in (``kept`` first:
    a band that includes 0 or 1 keeps those tasks)."""
    if samples == 0:
        return "unscored"
    rate = solved / samples
    if keep[0] <= rate <= keep[1]:
        return "kept"
    if rate == 0.0:
        return "never solved"
    if rate == 1.0:
        return "always solved"
    return "below band" if rate < keep[0] else "above band"


def _print_bands(title: str, counts: dict[str, int], histogram: dict[int, int], samples: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(title)
    table = Table()
    table.add_column("band")
    table.add_column("tasks", justify="right")
    for band in BANDS:
        if counts[band] or band != "unscored":
            table.add_row(band, str(counts[band]))
    console.print(table)
    console.print("solved of " + str(samples) + ": "
                  + ", ".join(f"{c}: {histogram.get(c, 0)}" for c in range(samples + 1)))


@flag_errors
def filter_tasks_command(
    env_id: str = typer.Argument(..., help="A registered id, e.g. coa/SynthHop-v1"),
    model: str | None = shared.MODEL,
    samples: int = typer.Option(8, "--samples", "-k", help="Samples per task (K)."),
    keep: str = typer.Option("0.1-0.9", help="Pass-rate band to keep, LOW-HIGH (inclusive)."),
    out: Path = typer.Option(Path("tasks.jsonl"), help="Where the kept tasks go (JSONL)."),
    agent: str | None = typer.Option(None, help="llm (default with --model) | oracle | MODULE:NAME"),
    engine: str = shared.ENGINE,
    base_url: str | None = shared.BASE_URL,
    api_key: str | None = shared.API_KEY,
    api_mode: str = shared.API_MODE,
    tokenizer: str | None = shared.TOKENIZER,
    device: str = shared.DEVICE,
    dtype: str = shared.DTYPE,
    temperature: float = typer.Option(1.0, help="Sampling temperature (pass rates need sampling: > 0)."),
    top_p: float = shared.TOP_P,
    max_new_tokens: int = shared.MAX_NEW_TOKENS,
    n: int | None = typer.Option(None, help="Only the first N tasks (default: all of the split)."),
    skip: int = typer.Option(0, help="Skip the first SKIP tasks of the split (e.g. those a teacher played "
                                     "for SFT), then take --n."),
    split: str = typer.Option("train", help="train (default) | test | all"),
    data: str | None = shared.DATA,
    env_option: list[str] = shared.ENV_OPTION,
    threshold: float = typer.Option(1.0, help="A sample is solved when its primary reward term reaches this."),
    concurrency: int = shared.CONCURRENCY,
    max_turns: int | None = shared.MAX_TURNS,
    max_tool_calls: int = shared.MAX_TOOL_CALLS,
    episode_timeout: float = shared.EPISODE_TIMEOUT,
    seed: int = shared.SEED,
    resume: bool = typer.Option(False, help="Keep the episodes already sampled next to OUT."),
    progress: bool | None = shared.PROGRESS,
) -> None:
    """Sample MODEL K times per task of ENV_ID and keep the tasks whose pass rate is in --keep."""
    from agents.engines import SamplingParams
    from agents.evaluation import env_tasks, episode_agents, play_tasks
    from agents.health import run_health
    from agents.metrics import group_by_task, pass_rates
    from coa_cli.run_output import report_health

    band = parse_keep(keep)
    if samples < 1 or concurrency < 1 or (n is not None and n < 1) or skip < 0:
        raise typer.BadParameter("-k, --n and --concurrency must be >= 1 and --skip >= 0")
    agent = agent or ("llm" if model else None)
    if agent is None:
        raise typer.BadParameter("give --model (or --agent oracle | MODULE:NAME)", param_hint="--model")
    make_kwargs, tasks = env_tasks(env_id, split=split, data=data, max_turns=max_turns,
                                   options=env_options(env_option))
    indices = list(range(skip, len(tasks) if n is None else min(skip + n, len(tasks))))
    if not indices:
        raise typer.BadParameter(f"--skip {skip} leaves none of the split's {len(tasks)} tasks",
                                 param_hint="--skip")
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
    factory, close = episode_agents(
        agent, model=model, seed=seed, task_indices=indices, samples=samples, engine=engine, base_url=base_url,
        api_key=api_key, api_mode=api_mode, tokenizer=tokenizer, device=device, dtype=dtype, sampling=sampling,
        system_prompt=None, concurrency=concurrency, timeout_s=min(episode_timeout, 600.0))

    out.parent.mkdir(parents=True, exist_ok=True)
    trajectories_path = out.with_suffix(".trajectories.jsonl")
    try:
        result = play_tasks(env_id, make_kwargs, factory, tasks, indices=indices, samples=samples,
                            out=trajectories_path, concurrency=concurrency, seed=seed,
                            episode_timeout_s=episode_timeout, max_tool_calls=max_tool_calls,
                            resume=resume, progress=progress_wanted(progress))
    finally:
        close()
    valid = [t for t in result.trajectories if not t.status.is_error]
    rates = pass_rates(group_by_task(valid), threshold)
    counts = dict.fromkeys(BANDS, 0)
    histogram: dict[int, int] = {}
    kept_rows = []
    for index in indices:
        task = tasks[index]
        solved, played = rates.get(task.task_id, (0, 0))
        task_band = band_of(solved, played, band)
        counts[task_band] += 1
        if played:
            histogram[solved] = histogram.get(solved, 0) + 1
        if task_band == "kept":
            kept_rows.append({"task_id": task.task_id, "pass_rate": solved / played, "solved": solved,
                              "samples": played, "question": task.question, "gold": list(task.gold)})
    with open(out, "w", encoding="utf-8") as handle:
        for row in kept_rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    report = {"env_id": env_id, "agent": agent, "model": model, "split": split, "samples": samples,
              "keep": list(band), "threshold": threshold, "tasks": len(indices), "bands": counts,
              "solved_histogram": {str(c): histogram.get(c, 0) for c in range(samples + 1)},
              "error_episodes": len(result.trajectories) - len(valid), "wall_s": result.wall_s,
              "per_task": {tasks[i].task_id: list(rates.get(tasks[i].task_id, (0, 0))) for i in indices}}
    health = run_health(result.trajectories, expected_episodes=len(indices) * samples)
    report["health"] = health.as_dict()
    out.with_suffix(".report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    _print_bands(f"{env_id} · split {split} · K={samples} · keep {band[0]:g}-{band[1]:g}", counts, histogram,
                 samples)
    typer.echo(f"kept {counts['kept']} of {len(indices)} tasks -> {out}")
    report_health(health)  # pass rates of a run that measured nothing are not pass rates
