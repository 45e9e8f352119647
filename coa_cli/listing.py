"""What ``coa list`` prints: the registered env ids, tools and env settings.

Every row comes from the declaration it describes (the registry, each tool's ``SPEC`` and
``BACKENDS``, the :class:`~coa_envs.config.EnvConfig` fields), so the listing cannot drift
from the code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["console", "env_rows", "option_rows", "print_table", "show_table", "tool_rows"]


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


def console(stderr: bool = False) -> Any:
    """The rich console every ``coa`` table prints on. In a terminal, its width; in a pipe or a
    file, ``$COLUMNS`` or wide enough that no line of a table wraps (rich would assume 80
    columns and cut cells), so ``coa list | grep MATH`` finds whole ids."""
    import os

    from rich.console import Console

    terminal = Console(stderr=stderr)
    if terminal.is_terminal or os.environ.get("COLUMNS"):
        return terminal
    return Console(stderr=stderr, width=1000)


def print_table(rows: Sequence[dict[str, Any]], title: str, columns: Sequence[str],
                caption: str | None = None) -> None:
    """One row per record, one column per field (see :func:`show_table`)."""
    show_table(f"{len(rows)} {title}", columns, [[_cell(row, column) for column in columns] for row in rows],
               caption=caption)


_NARROWEST = 8  # a column narrower than this folds most words: print records instead


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def show_table(title: str, columns: Sequence[str], cells: Sequence[Sequence[str]], *,
               caption: str | None = None) -> None:
    """Print a table whose cells are never cut (no "…"): the first column (the ids) is as wide
    as its longest entry, the others wrap between words and fold a word too long for them;
    where the terminal is too narrow even for that, each record is printed as its own block
    of ``field: value`` lines instead."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    out = console()
    words = [max([_longest_word(column), *(_longest_word(line[i]) for line in cells)])
             for i, column in enumerate(columns)]
    widths = [max(len(line[0]) for line in cells) if cells else words[0],
              *(min(word, _NARROWEST) for word in words[1:])]
    if sum(widths) + 3 * len(widths) + 1 <= out.width:
        table = Table(title=escape(title), caption=escape(caption) if caption else None)
        for index, (column, width) in enumerate(zip(columns, widths, strict=True)):
            table.add_column(escape(column), min_width=width, overflow="fold", no_wrap=index == 0)
        for line in cells:
            table.add_row(*map(escape, line))
        out.print(table)
        return
    out.print(Text(title, style="bold"), overflow="fold")
    for line in cells:
        out.print(Text(line[0], style="bold"), overflow="fold")
        for column, value in zip(columns[1:], line[1:], strict=True):
            out.print(Text(f"  {column}: {value}"), overflow="fold")
    if caption:
        out.print(Text(caption), overflow="fold")
