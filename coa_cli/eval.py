"""``coa eval`` and ``coa report``: run an agent over an env's tasks; compare runs.

``coa eval ENV_ID --agent … --model … --engine hf|vllm|openai --n N --samples K
--concurrency C --out DIR [--resume]`` plays ``K`` samples of each of the first ``N`` tasks
with the concurrent rollout runner (:mod:`agents.rollout`), streams every trajectory to
``DIR/trajectories.jsonl`` as it finishes, and writes ``DIR/summary.json`` (accuracy =
avg@K = Pass@1, unbiased pass@k, best-of-K by a selector, turns, tool usage and errors,
tokens per episode, wall time; see :mod:`agents.metrics`) plus the two plots of
:mod:`agents.report`, and prints the table. ``coa report DIR…`` puts runs side by side.

Agents: ``oracle`` (gold answers; validates data and rewards), ``replay:FILE`` (plays a
recorded run's actions again, e.g. to re-score it), ``llm`` (an :class:`LLMPolicy` over
``--engine``; the default when ``--model`` is given), or ``MODULE:NAME`` (your own Agent
class, instantiated per episode -- with the episode's env, and its seed, when the constructor
takes ``env`` (and ``seed``), as the scripted teacher ``agents.teachers.scripted:ScriptedTeam``
does -- or a ``(observation, info) -> action`` callable).

Tasks come from the held-out side of the env's train/test partition (``--split test``, see
:mod:`coa_envs.tasks.split`): a benchmark's test set whole -- a data file given to a benchmark
id with ``--data`` included -- and a pool's fixed 20%; ``--split train`` plays a pool's
training tasks (a teacher producing SFT data). The summary names the split and how many of
its tasks were played. A run that completes but measured nothing (every call of a tool
failed, every episode errored, nothing played: :mod:`agents.health`) says so and exits 3.

The runner itself (tasks of a split, agents, policies, selectors, ``play_tasks``) is
:mod:`agents.evaluation`, usable without the command line; its names are importable from
here too for this release.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from coa_cli import options as shared  # the options coa eval, filter-tasks and teach share
from coa_cli.options import env_options, flag_errors, progress_wanted
from coa_cli.run_output import metric_table, report_health

__all__ = ["eval_command", "report_command"]

# The runner moved to agents.evaluation; its names stay importable from here for one release
# (loaded on first use, so `coa --help` does not import the envs).
_MOVED = ("agent_factory", "build_policy", "env_factory", "env_tasks", "episode_agents", "load_selector",
          "play_tasks", "split_description")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module("agents.evaluation"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")



@flag_errors
def eval_command(
    env_id: str = typer.Argument(..., help="A registered id, e.g. coa/MATH500-v1"),
    agent: str | None = typer.Option(None, help="oracle | replay:FILE | llm | MODULE:NAME "
                                                "(default: llm with --model, else oracle)"),
    model: str | None = shared.MODEL,
    engine: str = shared.ENGINE,
    base_url: str | None = shared.BASE_URL,
    api_key: str | None = shared.API_KEY,
    api_mode: str = shared.API_MODE,
    server_extensions: bool = shared.SERVER_EXTENSIONS,
    tokenizer: str | None = shared.TOKENIZER,
    device: str = shared.DEVICE,
    dtype: str = shared.DTYPE,
    temperature: float = typer.Option(1.0, help="Sampling temperature (0 = greedy)."),
    top_p: float = shared.TOP_P,
    max_new_tokens: int = shared.MAX_NEW_TOKENS,
    system_prompt: str | None = typer.Option(None, help="Prompt name (qa, web, code, math) or text."),
    n: int = typer.Option(20, help="Number of tasks (taken in order)."),
    samples: int = typer.Option(1, "--samples", "-k", help="Samples per task (K of avg@K, pass@k)."),
    concurrency: int = shared.CONCURRENCY,
    out: Path = typer.Option(Path("runs/eval"), help="Output directory."),
    resume: bool = typer.Option(False, help="Keep finished episodes in OUT and run the rest."),
    data: str | None = shared.DATA,
    env_url: str | None = typer.Option(None, help="Play ENV_ID in a `coa serve-env` server at this URL "
                                                  "(token: $COA_ENV_TOKEN)."),
    split: str = typer.Option("test", help="test (held-out tasks) | train | all: which side of the "
                                           "env's train/test partition to run (see `coa list`)."),
    env_option: list[str] = shared.ENV_OPTION,
    max_turns: int | None = shared.MAX_TURNS,
    protocol: str | None = typer.Option(None, help="tags | tools: how the model calls tools (default: the "
                                                   "env's; tools = native function calling)."),
    max_tool_calls: int = shared.MAX_TOOL_CALLS,
    episode_timeout: float = shared.EPISODE_TIMEOUT,
    selector: str = typer.Option("majority", help="Best-of-K selector: majority | judge | MODULE:NAME"),
    judge_url: str | None = typer.Option(None, help="judge selector: endpoint (default $COA_JUDGE_BASE_URL)."),
    judge_model: str | None = typer.Option(None, help="judge selector: model (default $COA_JUDGE_MODEL)."),
    seed: int = shared.SEED,
    plots: bool = typer.Option(True, help="Write the accuracy/tool plots to OUT/plots."),
    progress: bool | None = shared.PROGRESS,
    table: bool = typer.Option(True, help="Print the summary table."),
) -> None:
    """Run AGENT on ENV_ID; write trajectories.jsonl, summary.json and plots; print the table."""
    from agents.engines import SamplingParams
    from agents.evaluation import env_factory, env_tasks, episode_agents, load_selector, play_tasks, split_description
    from agents.health import run_health
    from agents.metrics import summarize
    from agents.report import Run, comparison_rows, write_plots

    if samples < 1 or n < 1 or concurrency < 1:
        raise typer.BadParameter("--n, --samples and --concurrency must be >= 1")
    agent = agent or ("llm" if model else "oracle")
    choose = load_selector(selector, judge_url, judge_model)
    options = env_options(env_option)
    make_kwargs, tasks = env_tasks(env_id, split=split, data=data, max_turns=max_turns, protocol=protocol,
                                   env_url=env_url, options=options)
    indices = list(range(min(n, len(tasks))))
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
    factory, close = episode_agents(
        agent, model=model, seed=seed, task_indices=indices, samples=samples, engine=engine, base_url=base_url,
        api_key=api_key, api_mode=api_mode, tokenizer=tokenizer, device=device, dtype=dtype, sampling=sampling,
        system_prompt=system_prompt, concurrency=concurrency, timeout_s=min(episode_timeout, 600.0),
        server_extensions=server_extensions)

    out.mkdir(parents=True, exist_ok=True)
    trajectories_path = out / "trajectories.jsonl"
    try:
        result = play_tasks(env_id, make_kwargs, factory, tasks, indices=indices, samples=samples,
                            out=trajectories_path, concurrency=concurrency, seed=seed,
                            episode_timeout_s=episode_timeout, max_tool_calls=max_tool_calls,
                            resume=resume, progress=progress_wanted(progress),
                            make_env=env_factory(env_id, make_kwargs, env_url))
    finally:
        close()
    health = run_health(result.trajectories, expected_episodes=len(indices) * samples)
    extra = {"agent": agent, "model": model, "engine": engine if agent == "llm" else None,
             "selector": selector, "seed": seed, "split": split, "env_url": env_url,
             "split_description": split_description(env_id, split, make_kwargs),
             "tasks_in_split": len(tasks),
             "distinct_tasks": len({t.task_id for t in result.trajectories}),
             "resumed_episodes": result.skipped,
             "failed_episodes": sum(1 for t in result.trajectories if t.status != "ok"),
             "health": health.as_dict()}
    summary = summarize(env_id, result.trajectories, samples=samples, wall_s=result.wall_s,
                        selector=choose, extra=extra)
    if hasattr(choose, "fallbacks"):  # a judge that failed on some tasks (majority decided)
        summary["selector_fallbacks"] = choose.fallbacks
        choose.close()
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    run = Run(label=out.name or str(out), path=out, summary=summary,
              trajectories=list(result.trajectories))
    if plots:
        try:
            write_plots([run], out / "plots")
        except ImportError:
            typer.echo("plots skipped: matplotlib is not installed (pip install coa-envs[llm])", err=True)
    if table:
        metric_table(f"{env_id} · split {split} · agent={agent}" + (f" · {engine}:{model}" if agent == "llm" else ""),
                     comparison_rows([run]), [run.label])
    _warn_about_scores(summary)
    report_health(health)


def _warn_about_scores(summary: dict[str, Any]) -> None:
    """Say when the accuracy printed above is not what it seems."""
    if summary.get("unscored"):
        typer.echo(f"warning: {summary['unscored']} episode(s) got no verdict (the reward failed, e.g. its "
                   "judge was down; see info.reward_error): left out of accuracy, not counted wrong", err=True)
    if summary.get("public_tests_only"):
        typer.echo(f"warning: {summary['public_tests_only']} episode(s) were scored on public tests only (the "
                   "statement's examples, which a lookup table passes): pass the official LiveCodeBench release "
                   "files with --data to score on private tests", err=True)


def report_command(
    runs: list[Path] = typer.Argument(..., help="Output directories of `coa eval`."),
    out: Path = typer.Option(Path("runs/report"), help="Where comparison.{md,json} and plots go."),
    plots: bool = typer.Option(True, help="Write accuracy_vs_turns.png and tool_usage.png."),
) -> None:
    """Compare eval runs side by side; write comparison.md/json and PNG plots."""
    from agents.report import load_run, write_report

    loaded = []
    labels: dict[str, int] = {}
    for path in runs:
        try:
            run = load_run(path)
        except FileNotFoundError as exc:
            raise typer.BadParameter(str(exc), param_hint="RUNS") from None
        labels[run.label] = labels.get(run.label, 0) + 1
        if labels[run.label] > 1:  # two dirs with one name: keep columns distinguishable
            run.label = f"{run.label}#{labels[run.label]}"
        loaded.append(run)
    data = write_report(loaded, out, plots=plots)
    metric_table(f"{len(loaded)} runs", data["rows"], [r.label for r in loaded])
    for path in data["plots"]:
        typer.echo(f"wrote {path}")
