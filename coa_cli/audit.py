"""``coa audit-reward ENV``: what does the env's reward pay to policies that solve nothing?

Plays the degenerate policies of :mod:`coa_envs.audit` (early exits, constants, hedged lists,
copied pages, injected verdicts, format and tool-use farming, a lookup table of a code
statement's examples) on the first ``--n`` tasks of ENV with the env's own reward (your reward
block via ``-e reward=...``), prints the best and mean reward each reached, and exits 1 when a
correctness (primary) term paid any of them more than ``--fail-above``. Scores on public tests
only (a code task's statement examples, which a lookup table passes) are flagged, not failed.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from coa_cli.options import DATA, ENV_OPTION, key_values

__all__ = ["audit_reward_command"]


def _print(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report['env_id']} · {len(report['tasks'])} tasks · reward {report['reward']}")
    for column in ("policy", "kind", "best primary", "mean primary", "best reward", "unscored", "public only"):
        table.add_column(column, justify="left" if column in ("policy", "kind") else "right",
                         no_wrap=column == "policy")
    for row in report["policies"]:
        leak = row["name"] in report["leaks"]
        table.add_row(f"[red]{row['name']}[/red]" if leak else row["name"], row["kind"],
                      f"{row['best_primary']:.3f}", f"{row['mean_primary']:.3f}", f"{row['best_reward']:.3f}",
                      str(row["unscored"]), str(row["public_tests_only"]))
    Console().print(table)


def audit_reward_command(
    env_id: str = typer.Argument(..., help="A registered id, e.g. coa/SynthHop-v1"),
    n: int = typer.Option(5, help="Tasks to play each policy on (the first N of the split)."),
    policy: list[str] = typer.Option(None, "--policy", "-p", help="Only these policies (repeatable)."),
    split: str = typer.Option("test", help="test | train | all: which tasks (see `coa list`)."),
    data: str | None = DATA,
    env_option: list[str] = ENV_OPTION,
    out: Path | None = typer.Option(None, "--json", help="Also write the report as JSON here."),
    fail_above: float = typer.Option(0.0, help="Exit 1 when a degenerate policy's correctness score exceeds this."),
) -> None:
    """Play degenerate policies on ENV_ID and report the best reward each reached."""
    from coa_envs.audit import audit_env

    if n < 1:
        raise typer.BadParameter("--n must be >= 1", param_hint="--n")
    make_kwargs = key_values(env_option)
    make_kwargs["task_options"] = {**dict(make_kwargs.get("task_options") or {}), "split": split}
    if data:
        make_kwargs["data_path"] = data
    try:
        report = audit_env(env_id, n_tasks=n, policies=policy or None, make_kwargs=make_kwargs).to_dict()
    except ValueError as exc:  # an unknown policy, a bad option
        raise typer.BadParameter(str(exc)) from None
    _print(report)
    for entry in report["gold_hygiene"]:
        typer.echo(f"data: {entry['source']}: {entry['refused_aliases']} gold alias(es) normalise to nothing "
                   f"(refused); {len(entry['dropped_tasks'])} task(s) dropped", err=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    over = [row["name"] for row in report["policies"] if row["name"] in report["leaks"]
            and row["best_primary"] > fail_above]
    if over:
        typer.echo(f"the reward paid degenerate policies for correctness: {over}", err=True)
        raise typer.Exit(1)
