"""What ``coa list`` prints: the registered env ids, tools and env settings.

Every row comes from the declaration it describes (the registry, each tool's ``SPEC`` and
``BACKENDS``, the :class:`~coa_envs.config.EnvConfig` fields), so the listing cannot drift
from the code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["env_rows", "option_rows", "print_table", "tool_rows"]


def env_rows() -> list[dict[str, Any]]:
    from coa_envs.registry import describe, ids

    return [dict(describe(env_id)) for env_id in ids()]


def tool_rows() -> list[dict[str, Any]]:
    from coa_envs.tools import tool_backends, tool_names, tool_spec

    return [{"tool": name, "backends": list(tool_backends(name)), "description": tool_spec(name).summary,
             "argument": tool_spec(name).argument} for name in tool_names()]


def option_rows() -> list[dict[str, Any]]:
    from coa_envs.config import describe_options

    return describe_options()


def _cell(row: dict[str, Any], column: str) -> str:
    if column == "tools":
        return ", ".join(f"{k}:{v}" for k, v in row["tools"].items())
    if column == "backends":
        return ", ".join(row["backends"])
    if column == "set in":
        return ", ".join(row["set_in"])
    if column == "description" and "doc" in row:
        return row["doc"]
    value = row.get(column.replace(" ", "_"), row.get(column))
    return "" if value is None and column != "default" else str(value)


def print_table(rows: Sequence[dict[str, Any]], title: str, columns: Sequence[str],
                caption: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(rows)} {title}", caption=caption)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(row, column) for column in columns))
    Console().print(table)
