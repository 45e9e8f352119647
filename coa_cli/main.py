"""The ``coa`` command line. Each sub-command lives in its own module beside this one."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from coa_cli.audit import audit_reward_command
from coa_cli.bench import bench_command
from coa_cli.cache import app as cache_app
from coa_cli.compare import compare_command
from coa_cli.distill import distill_command
from coa_cli.eval import eval_command, report_command
from coa_cli.export_adapter import export_adapter_command
from coa_cli.filter_tasks import filter_tasks_command
from coa_cli.gateway import gateway_command
from coa_cli.mcp import app as mcp_app
from coa_cli.pairs import pairs_command
from coa_cli.recipe import recipe_app
from coa_cli.retriever import app as retriever_app
from coa_cli.serve import serve_command
from coa_cli.serve_env import serve_env_command
from coa_cli.teach import teach_command
from coa_cli.train import train_app
from coa_cli.view import view_command

DEBUG_ENV_VAR = "COA_DEBUG"


def _user_error(exc: BaseException) -> bool:
    """An expected mistake whose message says what to do (:mod:`coa_envs.errors`), a mistyped
    env id (Gymnasium's errors), or a file the command was pointed at that is not there."""
    import gymnasium as gym

    from coa_envs.configkit import ConfigError
    from coa_envs.errors import UserError

    if isinstance(exc, (UserError, ConfigError, gym.error.Error)):
        return True
    return isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)) and bool(exc.filename)


class _CoaGroup(TyperGroup):
    """The ``coa`` group: ``--debug`` anywhere on the line (or ``COA_DEBUG=1``) keeps the
    traceback of a failing command; without it, an expected user error (:func:`_user_error`)
    is one message and exit status 1, never a traceback."""

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        args = list(sys.argv[1:] if args is None else args)
        if "--debug" in args:
            args = [a for a in args if a != "--debug"]
            os.environ[DEBUG_ENV_VAR] = "1"  # and for the subprocesses a command starts
        if not sys.stderr.isatty():  # logged or piped: no download/loading progress bars in it
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        return super().main(args, *rest, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if os.environ.get(DEBUG_ENV_VAR, "") in ("", "0") and _user_error(exc):
                message = str(exc) or type(exc).__name__
                typer.secho(f"Error: {message}", err=True, fg="red")
                typer.echo("(coa --debug ... shows the traceback)", err=True)
                raise typer.Exit(1) from None
            raise


app = typer.Typer(cls=_CoaGroup, no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Chain-of-Agents environments. --debug (anywhere on the line) shows the traceback "
                       "of an error.")


@app.command("list")
def list_envs(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    tools: bool = typer.Option(False, "--tools", help="List the registered tools instead of the envs."),
    options: bool = typer.Option(False, "--options", help="List the settings an env id accepts instead."),
) -> None:
    """List every registered env id with its family, tools, reward and train/test split (or the
    registered tools, or the settings an env id accepts)."""
    from coa_cli.listing import env_rows, option_rows, print_table, tool_rows

    caption = None
    if tools:
        rows, title, columns = tool_rows(), "registered tools", ("tool", "backends", "description")
    elif options:
        rows, title, columns = option_rows(), "env settings (registry entry / gym.make)", (
            "key", "allowed", "default", "set in", "description")
    else:
        from coa_envs.tasks.split import SPLIT_LEGEND

        rows, title, caption = env_rows(), "coa-envs environments", SPLIT_LEGEND
        columns = ("id", "family", "tools", "reward", "max turns", "split")
    from sandbox import unisolated_warning

    warning = unisolated_warning()  # the default backend: only ever unisolated by explicit choice
    if not (tools or options):
        unisolated = [row["id"] for row in rows if row["tools"].get("code") == "subprocess"]
        if unisolated:
            note = f"the code tool of {unisolated} runs unisolated (backend subprocess)"
            warning = f"{warning}; {note}" if warning else note
    if warning:
        typer.echo(f"WARNING: {warning}", err=True)
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    print_table(rows, title, columns, caption=caption)


app.command("eval")(eval_command)
app.command("report")(report_command)
app.command("filter-tasks")(filter_tasks_command)
app.add_typer(retriever_app, name="retriever")
app.add_typer(train_app, name="train")
app.add_typer(cache_app, name="cache")
app.add_typer(mcp_app, name="mcp")
app.add_typer(recipe_app, name="recipe")
app.command("serve")(serve_command)
app.command("gateway")(gateway_command)
app.command("serve-env")(serve_env_command)
app.command("distill")(distill_command)
app.command("teach")(teach_command)
app.command("bench")(bench_command)
app.command("audit-reward")(audit_reward_command)
app.command("view")(view_command)
app.command("pairs")(pairs_command)
app.command("export-adapter")(export_adapter_command)
app.command("compare")(compare_command)


if __name__ == "__main__":
    app()
