"""The ``coa`` command line. Each sub-command lives in its own module beside this one."""

from __future__ import annotations

import json

import typer

from coa_cli.bench import bench_command
from coa_cli.cache import app as cache_app
from coa_cli.distill import distill_command
from coa_cli.eval import eval_command, report_command
from coa_cli.retriever import app as retriever_app
from coa_cli.serve import serve_command
from coa_cli.train import train_app
from coa_cli.view import view_command

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Chain-of-Agents environments.")


@app.command("list")
def list_envs(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List every registered env id with its family, tools, reward and train/test split."""
    from coa_envs.registry import describe, ids
    from coa_envs.tasks.split import SPLIT_LEGEND

    rows = [describe(env_id) for env_id in ids()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(rows)} coa-envs environments", caption=SPLIT_LEGEND)
    for column in ("id", "family", "tools", "reward", "max turns", "split"):
        table.add_column(column)
    for row in rows:
        tools = ", ".join(f"{k}:{v}" for k, v in row["tools"].items())
        table.add_row(row["id"], row["family"], tools, str(row["reward"]), str(row["max_turns"]), row["split"])
    Console().print(table)


app.command("eval")(eval_command)
app.command("report")(report_command)
app.add_typer(retriever_app, name="retriever")
app.add_typer(train_app, name="train")
app.add_typer(cache_app, name="cache")
app.command("serve")(serve_command)
app.command("distill")(distill_command)
app.command("bench")(bench_command)
app.command("view")(view_command)


if __name__ == "__main__":
    app()
