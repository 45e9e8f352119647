"""``coa teach ENV --system SYSTEM.yaml --n N --out DIR``: a multi-agent teacher plays an env.

The team of the system file (:mod:`agents.teachers`: a manager that plans and delegates, tool
agents acting through the env's own tools, a reflector and a verifier, each on its own
OpenAI-compatible endpoint) plays the first ``N`` tasks with the same runner as ``coa eval``
(concurrency, per-episode deadline, ``--resume``). Its episodes are training data, so the tasks
come from the training side of the env's partition (``--split train``; a benchmark test set
refuses it: give a training file with ``--data``). ``DIR/trajectories.jsonl`` holds every
episode as the env saw it plus the agents' log; ``DIR/summary.json`` the teacher's accuracy,
tool use and per-agent calls and tokens. ``coa distill DIR --out FILE`` then converts the runs
into CoA trajectories, filters them and writes SFT data.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import typer

from coa_cli.options import DATA, MAX_TURNS, PROGRESS, SEED, progress_wanted

__all__ = ["teach_command"]


def _make_kwargs(split: str, data: str | None, max_turns: int | None, env_kwargs: str | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if env_kwargs:
        try:
            kwargs = json.loads(env_kwargs)
        except json.JSONDecodeError as error:
            raise typer.BadParameter(f"not JSON: {error}", param_hint="--env-kwargs") from None
        if not isinstance(kwargs, dict):
            raise typer.BadParameter("must be a JSON object of gym.make options", param_hint="--env-kwargs")
    kwargs["task_options"] = {**(kwargs.get("task_options") or {}), "split": split}
    if data:
        kwargs["data_path"] = data
    if max_turns is not None:
        kwargs["max_turns"] = max_turns
    return kwargs


def _teacher_summary(trajectories: list[Any]) -> dict[str, Any]:
    """Per-agent calls and tokens, verifier decisions and role contributions over the run."""
    agents: dict[str, dict[str, int]] = {}
    roles: dict[str, int] = {}
    verdicts: dict[str, int] = {}
    fallbacks = 0
    for trajectory in trajectories:
        teacher = trajectory.info.get("teacher") or {}
        for name, counts in (teacher.get("agents") or {}).items():
            total = agents.setdefault(name, {})
            for key, value in counts.items():
                total[key] = total.get(key, 0) + int(value)
        for event in teacher.get("events") or []:
            if event["kind"] not in ("tool", "answer"):
                roles[event["kind"]] = roles.get(event["kind"], 0) + 1
        for verdict in teacher.get("verdicts") or []:
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
        fallbacks += bool(teacher.get("fallback_answer"))
    return {"agents": agents, "role_contributions": roles, "verdicts": verdicts, "fallback_answers": fallbacks}


def teach_command(
    env_id: str = typer.Argument(..., help="Registered env id, e.g. coa/SynthHop-v1."),
    system: Path = typer.Option(..., "--system", exists=True, dir_okay=False,
                                help="Teacher system YAML (see examples/teacher_*.yaml)."),
    n: int = typer.Option(20, help="Number of tasks (taken in order)."),
    out: Path = typer.Option(Path("runs/teach"), help="Output directory."),
    samples: int = typer.Option(1, "--samples", "-k", help="Runs per task."),
    concurrency: int = typer.Option(2, help="Episodes in flight (each a whole team)."),
    base_url: str | None = typer.Option(None, help="Override the system's default endpoint URL."),
    model: str | None = typer.Option(None, help="Override the system's default endpoint model."),
    data: str | None = DATA,
    split: str = typer.Option("train", help="train (SFT data comes from training tasks) | test | all: which side "
                                            "of the env's train/test partition to play (see `coa list`)."),
    max_turns: int | None = MAX_TURNS,
    env_kwargs: str | None = typer.Option(None, help="JSON object of further gym.make options (recorded "
                                                      "for replay), e.g. '{\"task_options\": {\"port\": 8765}}'."),
    episode_timeout: float = typer.Option(1800.0, help="Seconds per episode before error:timeout."),
    seed: int = SEED,
    resume: bool = typer.Option(False, help="Keep finished episodes in OUT and run the rest."),
    progress: bool | None = PROGRESS,
) -> None:
    """Run a multi-agent teacher on ENV_ID; write trajectories.jsonl and summary.json."""
    import gymnasium as gym

    import coa_envs  # noqa: F401  (registers ids)
    from agents.evaluation import play_tasks  # the same runner, file order and table as coa eval
    from agents.health import run_health
    from agents.metrics import summarize
    from agents.report import Run, comparison_rows
    from agents.teachers import SystemConfigError, load_system, teacher_factory
    from coa_cli.run_output import metric_table, report_health

    if samples < 1 or n < 1 or concurrency < 1:
        raise typer.BadParameter("--n, --samples and --concurrency must be >= 1")
    overrides = {key: value for key, value in (("base_url", base_url), ("model", model)) if value}
    try:
        team = load_system(system, **overrides)
    except SystemConfigError as error:
        raise typer.BadParameter(str(error), param_hint="--system") from None
    make_kwargs = _make_kwargs(split, data, max_turns, env_kwargs)
    try:
        probe = gym.make(env_id, **make_kwargs)
    except (gym.error.Error, ValueError, TypeError, OSError) as exc:
        raise typer.BadParameter(str(exc), param_hint="ENV_ID / --env-kwargs") from None
    tasks = list(probe.unwrapped.tasks)
    env_tools = list(probe.unwrapped.config.tools)
    probe.close()
    members = [agent.name for agent in team.agents_for(env_tools)]
    if not members:
        raise typer.BadParameter(f"no tool agent of {system} can use {env_id}'s tools {env_tools}",
                                 param_hint="--system")
    indices = list(range(min(n, len(tasks))))
    out.mkdir(parents=True, exist_ok=True)
    (out / "system.json").write_text(json.dumps({"env_id": env_id, "make_kwargs": make_kwargs, "members": members,
                                                 "system": dataclasses.asdict(team)}, indent=2), encoding="utf-8")
    trajectories_path = out / "trajectories.jsonl"
    result = play_tasks(env_id, make_kwargs, teacher_factory(team, make_kwargs), tasks, indices=indices,
                        samples=samples, out=trajectories_path, concurrency=concurrency, seed=seed,
                        episode_timeout_s=episode_timeout, max_tool_calls=10_000, end_on_length=False,
                        resume=resume, progress=progress_wanted(progress))
    extra = {"agent": f"teacher:{team.name}", "system": str(system), "members": members, "seed": seed, "split": split,
             "resumed_episodes": result.skipped,
             "failed_episodes": sum(1 for t in result.trajectories if t.status != "ok")}
    summary = summarize(env_id, result.trajectories, samples=samples, wall_s=result.wall_s, extra=extra)
    summary["teacher"] = _teacher_summary(result.trajectories)
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    run = Run(label=out.name or str(out), path=out, summary=summary, trajectories=list(result.trajectories))
    metric_table(f"{env_id} · teacher={team.name} ({', '.join(members)})", comparison_rows([run]), [run.label])
    health = run_health(result.trajectories, expected_episodes=len(indices) * samples)
    summary["health"] = health.as_dict()
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    if not health.problems:
        typer.echo(f"next: coa distill {out} --out {out / 'sft.jsonl'} --sharegpt {out / 'sft_sharegpt.jsonl'}")
    report_health(health)  # a teacher that could not play gives no data to distil

