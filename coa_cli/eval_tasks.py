"""Which env and tasks a ``coa eval`` (``coa filter-tasks``, ``coa teach``) run plays: the
``--env-option``/``--max-turns``/``--protocol`` options checked flag by flag (an error names the
flag that caused it), the tasks of ``--split`` (of ``--data``), the env factory (in process, or a
served env with ``--env-url``) and the split's description for the summary ("test (test set:
every task)", "test (held-out 20% of a pool)"; :mod:`coa_envs.tasks.split`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from coa_cli.options import key_values

__all__ = ["env_factory", "env_options", "env_tasks", "split_description"]


def env_options(given: list[str] | None) -> dict[str, Any]:
    """``--env-option KEY=VALUE`` flags as gym.make options (dotted keys nest, YAML values)."""
    return key_values(given, "--env-option")


def env_factory(env_id: str, make_kwargs: dict[str, Any], env_url: str | None = None) -> Callable[[], Any]:
    """``make_env()`` for a run: ``gym.make`` in this process, or a ``coa/Remote-v0`` session on
    the env server at ``env_url`` (``coa serve-env``) with the same options."""
    import gymnasium as gym

    import coa_envs  # noqa: F401  (registers ids)

    if env_url:
        from coa_envs.registry import REMOTE_ID

        return lambda: gym.make(REMOTE_ID, base_url=env_url, env_id=env_id, overrides=make_kwargs)
    return lambda: gym.make(env_id, **make_kwargs)


def _check_flags(env_id: str, stages: list[tuple[str, dict[str, Any]]]) -> None:
    """Validate the options flag by flag (without loading any task), so an error names the
    flag that caused it: ``-e tools.wiki_search.top_k=abc`` is an error of ``--env-option``."""
    import gymnasium as gym

    from coa_envs.config import build_config, deep_merge
    from coa_envs.registry import check_id, entry

    try:
        check_id(env_id)
    except gym.error.Error as exc:
        raise typer.BadParameter(str(exc), param_hint="ENV_ID") from None
    so_far: dict[str, Any] = {}
    for flag, given in stages:
        so_far = deep_merge(so_far, given)
        try:
            build_config(entry(env_id), so_far)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=flag) from None


def env_tasks(env_id: str, *, split: str, data: str | None, max_turns: int | None,
              protocol: str | None = None, env_url: str | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[Any]]:
    """The ``gym.make`` options of a run (``options`` from ``--env-option``, then split, data,
    turn limit, protocol) and the tasks they give; a bad id or option becomes the CLI error
    that names the flag."""
    import gymnasium as gym

    from coa_envs.errors import UserError
    from coa_envs.tasks import DataNotFoundError
    from coa_envs.tasks.split import SplitError

    stages = [("--env-option/-e", dict(options or {})), ("--max-turns", {"max_turns": max_turns}),
              ("--protocol", {"protocol": protocol})]
    stages = [(flag, given) for flag, given in stages if None not in given.values()]
    if not env_url:  # a served env is checked by its server
        _check_flags(env_id, stages)
    make_kwargs: dict[str, Any] = {}
    for _, given in stages:
        make_kwargs.update(given)
    make_kwargs["task_options"] = {**dict(make_kwargs.get("task_options") or {}), "split": split}
    if data:
        make_kwargs["data_path"] = data
    try:
        probe = env_factory(env_id, make_kwargs, env_url)()
    except gym.error.Error as exc:
        raise typer.BadParameter(str(exc), param_hint="ENV_ID") from None
    except SplitError as exc:  # split=train on a test set, or a split that does not exist
        raise typer.BadParameter(str(exc), param_hint="--split") from None
    except DataNotFoundError as exc:  # no data, or not where --data points: the fix is --data
        raise typer.BadParameter(str(exc), param_hint="--data") from None
    except RuntimeError as exc:  # the env server refused (unknown id, override) or is unreachable
        raise typer.BadParameter(str(exc), param_hint="--env-url") from None
    except (ValueError, UserError) as exc:  # a malformed data file, a loader option
        raise typer.BadParameter(str(exc), param_hint="--data" if data else "ENV_ID") from None
    tasks = list(probe.unwrapped.tasks)
    probe.close()
    return make_kwargs, tasks


def split_description(env_id: str, split: str, make_kwargs: dict[str, Any]) -> str:
    """What ``split`` means for this env's data, for the summary: ``test (test set: every
    task)`` or ``test (held-out 20% of a pool)``."""
    import importlib

    from coa_envs.registry import entry
    from coa_envs.tasks.split import TEST_SET_NOTE

    try:
        note = importlib.import_module(f"coa_envs.tasks.{entry(env_id)['family']}").SPLIT_NOTE
    except (ImportError, AttributeError, KeyError):
        return split
    pool = bool(dict(make_kwargs.get("task_options") or {}).get("pool"))
    if note == TEST_SET_NOTE and not pool:
        return f"{split} (test set: every task)"
    side = {"test": "held-out 20%", "train": "training 80%", "all": "every task"}.get(split, split)
    return f"{split} ({side} of a pool)"
