"""``coa cache``: inspect and move record/replay caches (see coa_envs.tools.cache)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Record/replay tool caches.")


def _existing(db: Path) -> Path:
    if not db.is_file():
        raise typer.BadParameter(f"{db} does not exist")
    return db


@app.command("export")
def export_command(db: Path = typer.Argument(..., help="SQLite cache file."),
                   out: Path = typer.Argument(..., help="JSONL file to write.")) -> None:
    """Write every cached tool result as one JSON object per line."""
    from coa_envs.tools.cache import ToolCache

    store = ToolCache(_existing(db))
    count = store.export_jsonl(out)
    store.close()
    typer.echo(f"exported {count} entries to {out}")


@app.command("import")
def import_command(jsonl: Path = typer.Argument(..., help="JSONL written by `coa cache export`."),
                   db: Path = typer.Argument(..., help="SQLite cache file (created if missing).")) -> None:
    """Load exported entries into a cache (same keys are replaced)."""
    from coa_envs.tools.cache import ToolCache

    store = ToolCache(db)
    count = store.import_jsonl(jsonl)
    store.close()
    typer.echo(f"imported {count} entries into {db}")


@app.command("stats")
def stats_command(db: Path = typer.Argument(..., help="SQLite cache file.")) -> None:
    """Entries per tool/backend and how many are failures."""
    from coa_envs.tools.cache import ToolCache

    store = ToolCache(_existing(db))
    per_tool: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    for row in store.rows():
        label = f"{row['tool']}[{row['backend']}]"
        per_tool[label] += 1
        failures[label] += not row["ok"]
    store.close()
    for label, count in sorted(per_tool.items()):
        typer.echo(f"{label}: {count} entries ({failures[label]} failures)")
    typer.echo(f"total: {sum(per_tool.values())}")
