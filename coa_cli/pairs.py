"""``coa pairs RUN_DIR --out pairs.jsonl``: preference pairs from a ``coa eval -k K`` run.

Each task's K samples are ranked by reward, then length; the better ones become *chosen*,
the worse *rejected* (``trainers.dpo.pairs`` has the rule). The pairs keep both trajectories
whole (segments = CoA loss mask, token ids when recorded) for ``coa train dpo``.
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["pairs_command"]


def pairs_command(
    run: Path = typer.Argument(..., help="A `coa eval ENV -k K --out DIR` directory (or its "
                                         "trajectories.jsonl)."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write pairs.jsonl."),
    pairs_per_task: int = typer.Option(1, help="At most this many disjoint pairs per task "
                                               "(i-th best with i-th worst)."),
    min_margin: float = typer.Option(0.0, help="Smallest reward gap of a pair (0: any gap)."),
) -> None:
    """Build chosen/rejected pairs from the K samples per task of an eval run."""
    from rich.console import Console
    from rich.table import Table

    from trainers.dpo.pairs import PairOptions, PairsError, build_pairs, read_run, write_pairs

    try:
        options = PairOptions(pairs_per_task=pairs_per_task, min_margin=min_margin)
        trajectories, model, report = read_run(run)
    except PairsError as error:
        raise typer.BadParameter(str(error), param_hint="RUN_DIR / options") from None
    pairs, report = build_pairs(trajectories, options, source=str(run), model=model,
                                report=report)
    console = Console()
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}")
    if not pairs:
        raise typer.BadParameter(
            f"no pairs: {report.tasks} tasks, {report.tasks_single_sample} with fewer than 2 "
            f"usable samples, {report.tasks_equal_rewards} without a reward gap; sample more "
            "per task (coa eval -k K, K >= 2, temperature > 0)", param_hint="RUN_DIR")
    write_pairs(out, pairs)
    table = Table(title=f"pairs from {run}")
    table.add_column("")
    table.add_column("count")
    for key, value in report.rows():
        table.add_row(key, value)
    console.print(table)
    typer.echo(f"wrote {len(pairs)} pairs to {out}")
