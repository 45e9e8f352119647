"""Reading a trainer's YAML config plus ``key=value`` overrides on the command line.

``coa train sft|dpo|rl`` share it, so a bad config reads the same in each: typer's usage
error naming ``--config / overrides`` and the loader's message, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import typer

__all__ = ["OVERRIDES_CONTEXT", "RESUME", "config_option", "load_trainer_config", "overrides_argument"]

#: A command's context settings that let ``key=value`` overrides follow its options.
OVERRIDES_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}
RESUME = typer.Option(False, "--resume", help="Continue from the newest checkpoint in "
                      "bookkeeping.output_dir (same as bookkeeping.resume=latest).")


def config_option(what: str) -> Any:
    """``--config/-c FILE``: the trainer's YAML (``what`` says which, e.g. an example file)."""
    return typer.Option(..., "--config", "-c", exists=True, dir_okay=False, help=f"YAML config ({what}).")


def overrides_argument(examples: str) -> Any:
    """The ``key=value ...`` arguments after the options (dotted keys, YAML values)."""
    return typer.Argument(None, help=f"key=value overrides, e.g. {examples}.")

ConfigT = TypeVar("ConfigT")


def load_trainer_config(load: Callable[[Path, list[str]], ConfigT], config: Path,
                        overrides: Sequence[str] | None, resume: bool, **settings: Any) -> ConfigT:
    """``load(config, overrides)`` with ``--resume`` and the command's own options
    (``settings``: dotted key -> value, ``None`` meaning not given) appended as overrides."""
    from trainers.common import ConfigError

    extra = [*(overrides or []), *(["bookkeeping.resume=latest"] if resume else []),
             *(f"{key}={value}" for key, value in settings.items() if value is not None)]
    try:
        return load(config, extra)
    except ConfigError as error:
        raise typer.BadParameter(str(error), param_hint="--config / overrides") from error
