"""Command-line pieces several commands share: one ``KEY=VALUE`` override syntax.

Every command that takes settings on the command line (``coa eval -e``, ``coa filter-tasks
-e``, ``coa serve-env -e``, ``coa mcp serve --tool-config``, ``coa train ... key=value``)
reads them with the config toolkit's one parser (:func:`coa_envs.configkit.parse_overrides`):
dotted keys reach into mappings (``tools.wiki_search.top_k=1``) and values are YAML, so a
whole mapping works too (``tools={code: {backend: subprocess}}``).
"""

from __future__ import annotations

from typing import Any

import typer

__all__ = ["ENV_OPTION", "key_values"]

ENV_OPTION = typer.Option(
    None, "--env-option", "-e", help="gym.make option KEY=VALUE (dotted keys reach into mappings, "
    "values read as YAML), e.g. -e task_options.difficulty=easy -e tools.wiki_search.top_k=1 "
    "-e 'system_prompt=\"Search, then answer.\"'. Repeatable.")


def key_values(pairs: list[str] | None, option: str = "--env-option") -> dict[str, Any]:
    """``KEY=VALUE`` flags as one nested mapping; a malformed one is a usage error naming ``option``."""
    from coa_envs.configkit import ConfigError, parse_overrides

    for pair in pairs or ():
        key, sep, _ = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE: write it as key=value, e.g. max_turns=4",
                                     param_hint=option)
    try:
        return parse_overrides(list(pairs or ()))
    except ConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
