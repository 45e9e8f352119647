"""Command-line pieces several commands share: one ``KEY=VALUE`` override syntax, the model and
engine options of the commands that play tasks, and their setup errors as flag errors.

Every command that takes settings on the command line (``coa eval -e``, ``coa filter-tasks
-e``, ``coa serve-env -e``, ``coa mcp serve --tool-config``, ``coa train ... key=value``)
reads them with the config toolkit's one parser (:func:`coa_envs.configkit.parse_overrides`):
dotted keys reach into mappings (``tools.wiki_search.top_k=1``) and values are YAML, so a
whole mapping works too (``tools={code: {backend: subprocess}}``).

``coa eval``, ``coa filter-tasks``, ``coa teach`` and ``coa compare`` play tasks with the runner
of :mod:`agents.evaluation`; a setting it cannot use raises
:class:`~agents.evaluation.RunSetupError` naming the argument, which :func:`flag_errors`
turns into the usage error of the flag it came from.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer

__all__ = ["API_KEY", "API_MODE", "BASE_URL", "CONCURRENCY", "DATA", "DEVICE", "DTYPE", "ENGINE", "ENV_OPTION",
           "EPISODE_TIMEOUT", "FLAGS", "MAX_NEW_TOKENS", "MAX_TOOL_CALLS", "MAX_TURNS", "MODEL", "PROGRESS", "SEED",
           "SERVER_EXTENSIONS", "TOKENIZER", "TOP_P", "env_options", "flag_errors", "key_values", "progress_wanted"]

ENV_OPTION = typer.Option(
    None, "--env-option", "-e", help="gym.make option KEY=VALUE (dotted keys reach into mappings, "
    "values read as YAML), e.g. -e task_options.difficulty=easy -e tools.wiki_search.top_k=1 "
    "-e 'system_prompt=\"Search, then answer.\"'. Repeatable.")

# The model and engine options of the commands that play tasks (agents.evaluation.episode_agents).
MODEL = typer.Option(None, help="Model dir, hub id or catalogue name such as smollm2-135m "
                                 "(hf, vllm); served name (openai).")
ENGINE = typer.Option("hf", help="hf | vllm | openai")
BASE_URL = typer.Option(None, help="openai engine: endpoint, e.g. http://127.0.0.1:8000/v1")
API_KEY = typer.Option(None, help="openai engine: key (default $OPENAI_API_KEY).")
API_MODE = typer.Option("completions", help="openai engine: completions | chat")
SERVER_EXTENSIONS = typer.Option(
    True, "--server-extensions/--hosted-api",
    help="openai engine: send vLLM's request extensions (sampled token ids, the matched stop "
         "string, top_k), right for coa serve and vLLM; --hosted-api sends only standard OpenAI "
         "fields, for hosted APIs that refuse them (trajectories are then not token-exact).")
TOKENIZER = typer.Option(None, help="openai engine: local tokenizer for token ids.")
DEVICE = typer.Option("cpu", help="hf engine: cpu | cuda | cuda:N")
DTYPE = typer.Option("float32", help="hf/vllm: float32 | bfloat16 | float16 | auto")
TOP_P = typer.Option(1.0, help="Nucleus sampling.")
MAX_NEW_TOKENS = typer.Option(512, help="Token budget of one model turn.")
PROGRESS = typer.Option(None, "--progress/--no-progress",
                        help="Show a progress bar (default: only in a terminal, not when piped or logged).")

# The task and episode options of the commands that play tasks.
DATA = typer.Option(None, help="Task file/dir (sets data_path).")
MAX_TURNS = typer.Option(None, help="Override the env's turn limit.")
SEED = typer.Option(0, help="Base seed (episode seeds derive from it).")
CONCURRENCY = typer.Option(4, help="Episodes in flight.")
MAX_TOOL_CALLS = typer.Option(50, help="End an episode after this many tool calls.")
EPISODE_TIMEOUT = typer.Option(600.0, help="Seconds per episode before error:timeout.")

#: The flag of each argument a :class:`~agents.evaluation.RunSetupError` names.
FLAGS = {"agent": "--agent", "model": "--model", "selector": "--selector", "judge": "--judge-url/--judge-model",
         "engine": "--engine", "base_url": "--base-url", "env_id": "ENV_ID", "options": "--env-option/-e",
         "max_turns": "--max-turns", "protocol": "--protocol", "split": "--split", "data": "--data",
         "env_url": "--env-url"}

CommandT = TypeVar("CommandT", bound=Callable[..., Any])


def flag_errors(command: CommandT) -> CommandT:
    """``command`` with a :class:`~agents.evaluation.RunSetupError` raised as the usage error
    of the flag it names (``Invalid value for --split: ...``), exit status 2."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        from agents.evaluation import RunSetupError

        try:
            return command(*args, **kwargs)
        except RunSetupError as error:
            raise typer.BadParameter(str(error), param_hint=FLAGS.get(error.argument, error.argument)) from None

    return run  # type: ignore[return-value]


def progress_wanted(flag: bool | None) -> bool:
    """``--progress``/``--no-progress`` as given, else on only when the output is a terminal."""
    if flag is not None:
        return flag
    from coa_cli.listing import console

    return bool(console().is_terminal)


def env_options(given: list[str] | None) -> dict[str, Any]:
    """``--env-option KEY=VALUE`` flags as gym.make options (dotted keys nest, YAML values)."""
    return key_values(given, "--env-option")


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
