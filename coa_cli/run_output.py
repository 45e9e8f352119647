"""What the commands that play tasks print after a run: its metric table and its health.

``coa eval``, ``coa filter-tasks``, ``coa teach`` and ``coa compare`` (and ``coa report`` for
runs side by side) print the same table of :func:`agents.report.comparison_rows`, and a run that
completed but measured nothing (:mod:`agents.health`) says so and exits with status 3.
"""

from __future__ import annotations

from typing import Any

import typer

__all__ = ["metric_table", "report_health"]


def metric_table(title: str, rows: list[tuple[str, list[str]]], labels: list[str]) -> None:
    """One row per metric, one column per run (``labels``)."""
    from coa_cli.listing import show_table

    show_table(title, ["metric", *labels], [[key, *values] for key, values in rows])


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
