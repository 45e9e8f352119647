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
class, instantiated per episode, or a ``(observation, info) -> action`` callable).

Tasks come from the held-out side of the env's train/test partition (``--split test``, see
:mod:`coa_envs.tasks.split`): a benchmark test set whole, a pool's fixed 20%. ``--split all``
scores every task of a file given with ``--data``; ``--split train`` plays training tasks
(a teacher producing SFT data).
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

__all__ = ["agent_factory", "eval_command", "load_selector", "report_command"]


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


def _build_policy(engine: str, model: str, *, base_url: str | None, api_key: str | None,
                  api_mode: str, tokenizer: str | None, device: str, dtype: str,
                  sampling: Any, system_prompt: str | None, concurrency: int,
                  timeout_s: float) -> Any:
    from agents.engines import build_engine
    from agents.policy import LLMPolicy

    if engine == "hf":
        backend = build_engine("hf", model=model, device=device, dtype=dtype)
    elif engine == "vllm":
        backend = build_engine("vllm", model=model, dtype=dtype)
    elif engine == "openai":
        if not base_url:
            raise typer.BadParameter("the openai engine needs --base-url", param_hint="--base-url")
        tok: Any = None
        if tokenizer:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(tokenizer)
        backend = build_engine("openai", base_url=base_url, model=model,
                               api_key=api_key or os.environ.get("OPENAI_API_KEY", "EMPTY"),
                               mode=api_mode, tokenizer=tok, concurrency=concurrency,
                               timeout_s=timeout_s)
    else:
        raise typer.BadParameter(f"unknown engine {engine!r}; use hf, vllm or openai",
                                 param_hint="--engine")
    return LLMPolicy(backend, sampling=sampling, system_prompt=system_prompt)


def _sort_file(path: Path, order: dict[tuple[str, int], int]) -> None:
    """Rewrite the streamed JSONL in task/sample order (atomically), for stable diffs."""
    from agents.trajectory import read_trajectories, write_trajectory

    records = sorted(read_trajectories(path),
                     key=lambda t: (order.get((t.task_id, t.sample_index), 1 << 30), t.sample_index))
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for trajectory in records:
            write_trajectory(handle, trajectory)
    os.replace(tmp, path)


def _print_table(title: str, rows: list[tuple[str, list[str]]], labels: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    for label in labels:
        table.add_column(label, overflow="fold")
    for key, values in rows:
        table.add_row(key, *values)
    Console().print(table)


def eval_command(
    env_id: str = typer.Argument(..., help="A registered id, e.g. coa/MATH500-v0"),
    agent: str | None = typer.Option(None, help="oracle | replay:FILE | llm | MODULE:NAME "
                                                "(default: llm with --model, else oracle)"),
    model: str | None = typer.Option(None, help="Model dir/hub id (hf, vllm) or served name (openai)."),
    engine: str = typer.Option("hf", help="hf | vllm | openai"),
    base_url: str | None = typer.Option(None, help="openai engine: endpoint, e.g. http://127.0.0.1:8000/v1"),
    api_key: str | None = typer.Option(None, help="openai engine: key (default $OPENAI_API_KEY)."),
    api_mode: str = typer.Option("completions", help="openai engine: completions | chat"),
    tokenizer: str | None = typer.Option(None, help="openai engine: local tokenizer for token ids."),
    device: str = typer.Option("cpu", help="hf engine: cpu | cuda | cuda:N"),
    dtype: str = typer.Option("float32", help="hf/vllm: float32 | bfloat16 | float16 | auto"),
    temperature: float = typer.Option(1.0, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling."),
    max_new_tokens: int = typer.Option(512, help="Token budget of one model turn."),
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
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Run AGENT on ENV_ID; write trajectories.jsonl, summary.json and plots; print the table."""
    import gymnasium as gym

    import coa_envs  # noqa: F401  (registers ids)
    from agents.engines import SamplingParams
    from agents.metrics import summarize
    from agents.report import Run, comparison_rows, write_plots
    from agents.rollout import policy_factory, run_rollouts

    if samples < 1 or n < 1 or concurrency < 1:
        raise typer.BadParameter("--n, --samples and --concurrency must be >= 1")
    agent = agent or ("llm" if model else "oracle")
    choose = load_selector(selector, judge_url, judge_model)
    make_kwargs: dict[str, Any] = {"task_options": {"split": split}}
    if data:
        make_kwargs["data_path"] = data
    if max_turns is not None:
        make_kwargs["max_turns"] = max_turns
    if protocol is not None:
        make_kwargs["protocol"] = protocol
    def make_env() -> Any:
        if env_url:
            from coa_envs.registry import REMOTE_ID

            return gym.make(REMOTE_ID, base_url=env_url, env_id=env_id, overrides=make_kwargs)
        return gym.make(env_id, **make_kwargs)

    try:
        probe = make_env()
    except gym.error.Error as exc:
        raise typer.BadParameter(str(exc), param_hint="ENV_ID") from None
    except ValueError as exc:  # a bad option, or split=train on a benchmark test set
        raise typer.BadParameter(str(exc), param_hint="--split/--data") from None
    except RuntimeError as exc:  # the env server refused (unknown id, override) or is unreachable
        raise typer.BadParameter(str(exc), param_hint="--env-url") from None
    task_ids = [t.task_id for t in probe.unwrapped.tasks]
    probe.close()
    indices = list(range(min(n, len(task_ids))))

    policy, close = None, (lambda: None)
    if agent == "llm":
        if not model:
            raise typer.BadParameter("the llm agent needs --model", param_hint="--model")
        sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
        policy = _build_policy(engine, model, base_url=base_url, api_key=api_key, api_mode=api_mode,
                               tokenizer=tokenizer, device=device, dtype=dtype, sampling=sampling,
                               system_prompt=system_prompt, concurrency=concurrency,
                               timeout_s=min(episode_timeout, 600.0))
        factory, close = policy_factory(policy)
    else:
        factory = agent_factory(agent, seed=seed, task_indices=indices, samples=samples)

    out.mkdir(parents=True, exist_ok=True)
    trajectories_path = out / "trajectories.jsonl"
    try:
        result = run_rollouts(make_env, factory, task_indices=indices,
                              samples=samples, concurrency=concurrency, seed=seed,
                              episode_timeout_s=episode_timeout, max_tool_calls=max_tool_calls,
                              out=trajectories_path, resume=resume, progress=progress)
    finally:
        close()
    order = {(task_ids[i], k): i for i in indices for k in range(samples)}
    _sort_file(trajectories_path, order)
    extra = {"agent": agent, "model": model, "engine": engine if agent == "llm" else None,
             "selector": selector, "seed": seed, "split": split, "env_url": env_url,
             "distinct_tasks": len({t.task_id for t in result.trajectories}),
             "resumed_episodes": result.skipped,
             "failed_episodes": sum(1 for t in result.trajectories if t.status != "ok")}
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
    _print_table(f"{env_id} [{split}] · agent={agent}" + (f" · {engine}:{model}" if agent == "llm" else ""),
                 comparison_rows([run]), [run.label])


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
