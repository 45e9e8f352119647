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
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from coa_cli.eval_tasks import env_factory, env_options, env_tasks, split_description
from coa_cli.options import ENV_OPTION

__all__ = [
    "agent_factory",
    "build_policy",
    "env_factory",
    "env_options",
    "env_tasks",
    "episode_agents",
    "eval_command",
    "load_selector",
    "play_tasks",
    "report_command",
    "report_health",
    "split_description",
]


def _replay_factory(path: str, seed: int, task_indices: list[int], samples: int) -> Callable:
    """Per-episode replay agents: sample ``k`` of a task replays that task's ``k``-th recording."""
    from agents.replay import ReplayAgent
    from agents.rollout import episode_seed

    recordings = ReplayAgent(path).by_task
    sample_of = {episode_seed(seed, i, k): k for i in task_indices for k in range(samples)}

    class _OneReplay:
        def __init__(self, sample: int):
            self.sample, self.script = sample, []

        def reset(self, observation: str, info: dict[str, Any]) -> None:
            runs = recordings.get(info["task_id"])
            if not runs:
                raise KeyError(f"no recorded trajectory for task {info['task_id']!r}")
            self.script = list(runs[self.sample % len(runs)])

        def act(self, observation: str, info: dict[str, Any]) -> str:
            return self.script.pop(0) if self.script else ""

    return lambda env, episode: _OneReplay(sample_of.get(episode, 0))


def _import_object(spec: str, what: str, hint: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise typer.BadParameter(f"cannot import {what} {spec!r}: {exc}", param_hint=hint) from None
    return obj


def agent_factory(spec: str, *, seed: int = 0, task_indices: list[int] | None = None,
                  samples: int = 1, policy: Any = None) -> Callable[[Any, int], Any]:
    """``(env, episode_seed) -> Agent`` for an ``--agent`` spec (see the module docstring)."""
    if spec == "oracle":
        from agents.oracle import OracleAgent

        return lambda env, episode: OracleAgent(env)
    if spec.startswith("replay:"):
        return _replay_factory(spec.split(":", 1)[1], seed, task_indices or [], samples)
    if spec == "llm":
        if policy is None:
            raise typer.BadParameter("the llm agent needs --model", param_hint="--agent")
        return lambda env, episode: policy.fork(episode)
    if ":" in spec:
        from agents.base import as_agent

        obj = _import_object(spec, "agent", "--agent")
        if isinstance(obj, type):
            import inspect

            wants = inspect.signature(obj).parameters
            if "env" in wants:  # an env-aware agent (a scripted teacher) gets the episode's env
                return lambda env, episode: obj(env, **({"seed": episode} if "seed" in wants else {}))
            return lambda env, episode: obj()
        agent = as_agent(obj)  # a stateless callable or a thread-safe agent instance
        return lambda env, episode: agent
    raise typer.BadParameter(f"unknown agent {spec!r}; use oracle, replay:FILE, llm or MODULE:NAME",
                             param_hint="--agent")


def load_selector(spec: str, judge_url: str | None = None, judge_model: str | None = None) -> Callable:
    """``majority`` (vote over normalised answers), ``judge`` (an LLM picks the answer; see
    :class:`agents.selectors.JudgeSelector`) or ``MODULE:NAME`` of a
    ``(task_id, trajectories) -> index`` selector (a reward model…)."""
    from agents.metrics import majority_vote

    if spec == "majority":
        return majority_vote
    if spec == "judge":
        from agents.selectors import JudgeSelector

        try:
            return JudgeSelector(judge_url, judge_model)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--judge-url/--judge-model") from None
    if ":" in spec:
        return _import_object(spec, "selector", "--selector")
    raise typer.BadParameter(f"unknown selector {spec!r}; use majority, judge or MODULE:NAME",
                             param_hint="--selector")


def build_policy(*, engine: str, model: str, base_url: str | None, api_key: str | None,
                  api_mode: str, tokenizer: str | None, device: str, dtype: str,
                  sampling: Any, system_prompt: str | None, concurrency: int,
                  timeout_s: float, server_extensions: bool = True) -> Any:
    from agents.engines import build_engine
    from agents.policy import LLMPolicy

    if engine == "hf":
        backend = build_engine("hf", model=model, device=device, dtype=dtype)
    elif engine == "vllm":
        backend = build_engine("vllm", model=model, dtype=dtype)
    elif engine == "openai":
        if not base_url:
            raise typer.BadParameter("the openai engine needs --base-url", param_hint="--base-url")
        backend = build_engine("openai", base_url=base_url, model=model,
                               api_key=api_key or os.environ.get("OPENAI_API_KEY", "EMPTY"),
                               mode=api_mode, tokenizer=tokenizer, concurrency=concurrency,
                               timeout_s=timeout_s, server_extensions=server_extensions)
    else:
        raise typer.BadParameter(f"unknown engine {engine!r}; use hf, vllm or openai",
                                 param_hint="--engine")
    return LLMPolicy(backend, sampling=sampling, system_prompt=system_prompt)


def episode_agents(agent: str, *, model: str | None, seed: int, task_indices: list[int], samples: int,
                   **policy_options: Any) -> tuple[Callable[[Any, int], Any], Callable[[], None]]:
    """``(factory, close)`` for an ``--agent`` spec; ``llm`` builds the policy of ``--model``
    (:func:`build_policy` with ``policy_options``) and batches its episodes."""
    if agent != "llm":
        return agent_factory(agent, seed=seed, task_indices=task_indices, samples=samples), (lambda: None)
    from agents.rollout import policy_factory

    if not model:
        raise typer.BadParameter("the llm agent needs --model", param_hint="--model")
    return policy_factory(build_policy(model=model, **policy_options))


def _sort_file(path: Path, order: dict[tuple[str, int], int], latest: list[Any]) -> None:
    """Rewrite the streamed JSONL in task/sample order (atomically), for stable diffs, with
    the ``latest`` version of each episode (its group terms scored) in place of the streamed one."""
    from agents.trajectory import read_trajectories, write_trajectory

    newest = {(t.task_id, t.sample_index): t for t in latest}
    records = sorted((newest.get((t.task_id, t.sample_index), t) for t in read_trajectories(path)),
                     key=lambda t: (order.get((t.task_id, t.sample_index), 1 << 30), t.sample_index))
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for trajectory in records:
            write_trajectory(handle, trajectory)
    os.replace(tmp, path)


def play_tasks(env_id: str, make_kwargs: dict[str, Any], factory: Callable[[Any, int], Any], tasks: list[Any], *,
               indices: list[int], samples: int, out: Path, make_env: Callable[[], Any] | None = None,
               **rollout_kwargs: Any) -> Any:
    """Play ``samples`` episodes of each task in ``indices``, streaming them to ``out``; then
    score the reward's group terms over each task's samples (:mod:`agents.group_rewards`) and
    rewrite ``out`` in task/sample order. Returns the :class:`~agents.rollout.RolloutResult`."""
    from agents.group_rewards import score_groups
    from agents.metrics import group_by_task
    from agents.rollout import run_rollouts
    from coa_envs.config import build_config
    from coa_envs.registry import entry
    from coa_envs.rewards import build_reward

    result = run_rollouts(make_env or env_factory(env_id, make_kwargs), factory, task_indices=indices,
                          samples=samples, out=out, **rollout_kwargs)
    reward = build_reward(build_config(entry(env_id), make_kwargs).reward)
    by_id = {t.task_id: t for t in tasks}
    score_groups(group_by_task(result.trajectories).values(), reward, by_id.get)
    reward.close()
    order = {(tasks[i].task_id, k): i for i in indices for k in range(samples)}
    _sort_file(out, order, result.trajectories)
    return result


def _print_table(title: str, rows: list[tuple[str, list[str]]], labels: list[str]) -> None:
    from coa_cli.listing import show_table

    show_table(title, ["metric", *labels], [[key, *values] for key, values in rows])


# The model and engine options `coa eval` and `coa filter-tasks` share (see episode_agents).
MODEL = typer.Option(None, help="Model dir, hub id or catalogue name such as smollm2-135m "
                                 "(hf, vllm); served name (openai).")
ENGINE = typer.Option("hf", help="hf | vllm | openai")
BASE_URL = typer.Option(None, help="openai engine: endpoint, e.g. http://127.0.0.1:8000/v1")
API_KEY = typer.Option(None, help="openai engine: key (default $OPENAI_API_KEY).")
API_MODE = typer.Option("completions", help="openai engine: completions | chat")
SERVER_EXTENSIONS = typer.Option(
    True, "--server-extensions/--hosted-api",
    help="openai engine: send vLLM's request extensions (sampled token ids, the matched stop "
         "string, top_k), right for coa serve and vLLM; --hosted-api sends only standard OpenAI "
         "fields, for hosted APIs that refuse them (trajectories are then not token-exact).")
TOKENIZER = typer.Option(None, help="openai engine: local tokenizer for token ids.")
DEVICE = typer.Option("cpu", help="hf engine: cpu | cuda | cuda:N")
DTYPE = typer.Option("float32", help="hf/vllm: float32 | bfloat16 | float16 | auto")
TOP_P = typer.Option(1.0, help="Nucleus sampling.")
PROGRESS = typer.Option(None, "--progress/--no-progress",
                        help="Show a progress bar (default: only in a terminal, not when piped or logged).")


def progress_wanted(flag: bool | None) -> bool:
    """``--progress``/``--no-progress`` as given, else on only when the output is a terminal."""
    if flag is not None:
        return flag
    from coa_cli.listing import console

    return bool(console().is_terminal)
MAX_NEW_TOKENS = typer.Option(512, help="Token budget of one model turn.")


def eval_command(
    env_id: str = typer.Argument(..., help="A registered id, e.g. coa/MATH500-v1"),
    agent: str | None = typer.Option(None, help="oracle | replay:FILE | llm | MODULE:NAME "
                                                "(default: llm with --model, else oracle)"),
    model: str | None = MODEL,
    engine: str = ENGINE,
    base_url: str | None = BASE_URL,
    api_key: str | None = API_KEY,
    api_mode: str = API_MODE,
    server_extensions: bool = SERVER_EXTENSIONS,
    tokenizer: str | None = TOKENIZER,
    device: str = DEVICE,
    dtype: str = DTYPE,
    temperature: float = typer.Option(1.0, help="Sampling temperature (0 = greedy)."),
    top_p: float = TOP_P,
    max_new_tokens: int = MAX_NEW_TOKENS,
    system_prompt: str | None = typer.Option(None, help="Prompt name (qa, web, code, math) or text."),
    n: int = typer.Option(20, help="Number of tasks (taken in order)."),
    samples: int = typer.Option(1, "--samples", "-k", help="Samples per task (K of avg@K, pass@k)."),
    concurrency: int = typer.Option(4, help="Episodes in flight."),
    out: Path = typer.Option(Path("runs/eval"), help="Output directory."),
    resume: bool = typer.Option(False, help="Keep finished episodes in OUT and run the rest."),
    data: str | None = typer.Option(None, help="Task file/dir (sets data_path)."),
    env_url: str | None = typer.Option(None, help="Play ENV_ID in a `coa serve-env` server at this URL "
                                                  "(token: $COA_ENV_TOKEN)."),
    split: str = typer.Option("test", help="test (held-out tasks) | train | all: which side of the "
                                           "env's train/test partition to run (see `coa list`)."),
    env_option: list[str] = ENV_OPTION,
    max_turns: int | None = typer.Option(None, help="Override the env's turn limit."),
    protocol: str | None = typer.Option(None, help="tags | tools: how the model calls tools (default: the "
                                                   "env's; tools = native function calling)."),
    max_tool_calls: int = typer.Option(50, help="End an episode after this many tool calls."),
    episode_timeout: float = typer.Option(600.0, help="Seconds per episode before error:timeout."),
    selector: str = typer.Option("majority", help="Best-of-K selector: majority | judge | MODULE:NAME"),
    judge_url: str | None = typer.Option(None, help="judge selector: endpoint (default $COA_JUDGE_BASE_URL)."),
    judge_model: str | None = typer.Option(None, help="judge selector: model (default $COA_JUDGE_MODEL)."),
    seed: int = typer.Option(0, help="Base seed (episode seeds derive from it)."),
    plots: bool = typer.Option(True, help="Write the accuracy/tool plots to OUT/plots."),
    progress: bool | None = PROGRESS,
    table: bool = typer.Option(True, help="Print the summary table."),
) -> None:
    """Run AGENT on ENV_ID; write trajectories.jsonl, summary.json and plots; print the table."""
    from agents.engines import SamplingParams
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
        _print_table(f"{env_id} · split {split} · agent={agent}" + (f" · {engine}:{model}" if agent == "llm" else ""),
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


def report_health(health: Any) -> None:
    """Print a run's warnings and problems (:mod:`agents.health`) after its table; a run with a
    problem measured nothing, so the command exits with status 3."""
    for warning in health.warnings:
        typer.secho(f"WARNING: {warning}", err=True, fg="yellow")
    for problem in health.problems:
        typer.secho(f"ERROR: {problem}", err=True, fg="red")
    if health.problems:
        typer.secho("The run completed but measured nothing (exit status 3); see above and "
                    "docs/troubleshooting.md.", err=True, fg="red")
        raise typer.Exit(3)


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
    _print_table(f"{len(loaded)} runs", data["rows"], [r.label for r in loaded])
    for path in data["plots"]:
        typer.echo(f"wrote {path}")
