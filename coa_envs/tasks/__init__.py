"""Task loading: one module per family (``coa_envs.tasks.<family>.load_tasks``), listed in
:data:`FAMILIES`; the other modules here (``split``, ``web_common``, ``web_gaia``...) are the
loaders' helpers, never a family an env may name.

This package holds what every loader shares: the data error that names file, row and
field; resolution of ``pkg:`` paths (files shipped with the package) and of names relative
to ``COA_DATA_DIR``; and a per-process cache so that many envs of one id share one list.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from coa_envs.errors import OptionError, UserError
from coa_envs.options import Option, Schema
from coa_envs.types import Task

__all__ = [
    "FAMILIES",
    "DataNotFoundError",
    "TaskDataError",
    "clear_cache",
    "iter_jsonl",
    "load_family_tasks",
    "open_family_runtime",
    "require",
    "resolve_path",
    "select_tasks",
    "shipped_or_given",
    "task_option_schema",
]

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent

#: The task families, each the module ``coa_envs.tasks.<family>`` with ``load_tasks``: the one
#: list an env's ``family:`` is checked against. A new family is its module plus a name here.
FAMILIES: tuple[str, ...] = ("code", "math", "mhqa", "miniweb", "synthhop", "web")


class TaskDataError(UserError, ValueError):
    """A data file is malformed. The message names the file, the row and the field."""

    def __init__(self, file: str | Path, row: int | str, field: str, problem: str = "is missing"):
        self.file, self.row, self.field = str(file), row, field
        super().__init__(f"{file}: row {row}: field {field!r} {problem}")


class DataNotFoundError(UserError, FileNotFoundError):
    """No data for an env: the message says how to obtain it."""


def resolve_path(path: str | Path | None) -> Path | None:
    """Turn ``pkg:data/...`` into the installed file and bare names into ``$COA_DATA_DIR/name``."""
    if path is None:
        return None
    text = str(path)
    if text.startswith("pkg:"):
        return _PACKAGE_ROOT / text[4:]
    candidate = Path(text).expanduser()
    if candidate.exists() or candidate.is_absolute():
        return candidate
    data_dir = os.environ.get("COA_DATA_DIR")
    if data_dir and (Path(data_dir) / text).exists():
        return Path(data_dir) / text
    return candidate


def shipped_or_given(path: str | None, dataset: str, shipped: Mapping[str, str], family: str,
                     how_to_get: str) -> Path:
    """The file a loader reads: ``path`` (see :func:`resolve_path`), or with none the file
    shipped for ``dataset``, one of ``shipped``'s names. A file that is not there is a
    :class:`DataNotFoundError` that says ``how_to_get`` one."""
    if path is None and dataset not in shipped:
        raise ValueError(f"unknown {family} dataset {dataset!r}; allowed: {sorted(shipped)}")
    resolved = resolve_path(path if path is not None else shipped[dataset])
    assert resolved is not None
    if not resolved.exists():
        raise DataNotFoundError(f"{family} task file not found: {resolved} ({how_to_get})")
    return resolved


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(row_number, record)`` with 1-based row numbers; bad JSON names the row."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskDataError(path, number, "<line>", f"is not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise TaskDataError(path, number, "<line>", "is not a JSON object")
            yield number, record


def require(record: Mapping[str, Any], field: str, file: str | Path, row: int) -> Any:
    """Fetch a required field or raise the error that names file, row and field."""
    value = record.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise TaskDataError(file, row, field)
    return value


# Loader options that count something: below these they mean nothing (limit=0 is not "all").
_MINIMUMS = {"limit": 1, "num_tasks": 1, "port": 0}


def task_option_schema(family: str) -> Schema:
    """The loader options of ``family`` (``task_options``, the registry's ``tasks:``): the
    keyword parameters of its ``load_tasks``, with their types, plus ``task_list``."""
    module = importlib.import_module(f"coa_envs.tasks.{family}")
    schema = Schema.of_callable("task_options", module.load_tasks, minimums=_MINIMUMS)
    return schema.merged(Schema("task_options", {"task_list": Option(str | None)}))


_cache: dict[str, list[Task]] = {}
_cache_lock = threading.Lock()


def _cache_key(family: str, options: Mapping[str, Any]) -> str:
    return family + json.dumps(options, sort_keys=True, default=str)


def load_family_tasks(family: str, options: Mapping[str, Any]) -> list[Task]:
    """Load (once per process) the tasks of ``family`` with loader ``options``.

    ``task_list: PATH`` (every family) keeps only the tasks whose ids a JSONL file lists, one
    ``{"task_id": ...}`` per line, as ``coa filter-tasks`` writes them, in the loader's order.
    """
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} is not valid; allowed: {list(FAMILIES)}")
    if options.get("task_list") is not None:
        rest = {k: v for k, v in options.items() if k != "task_list"}
        return select_tasks(load_family_tasks(family, rest), options["task_list"])
    key = _cache_key(family, options)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    module = importlib.import_module(f"coa_envs.tasks.{family}")
    try:
        tasks = list(module.load_tasks(**options))
    except UserError:
        raise
    except ValueError as exc:  # the loader refused an option (a dataset name, a format...)
        raise OptionError(f"task_options ({family} loader): {exc}") from exc
    if not tasks:
        raise DataNotFoundError(f"the {family} loader returned no tasks for options {dict(options)}")
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"the {family} loader returned duplicate task ids")
    with _cache_lock:
        _cache[key] = tasks
    return tasks


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def select_tasks(tasks: list[Task], task_list: str | Path) -> list[Task]:
    """The tasks whose ids the JSONL ``task_list`` names; an id the tasks lack is an error
    (a list made from another split, family or data file)."""
    path = resolve_path(task_list)
    if path is None or not path.is_file():
        raise DataNotFoundError(f"task_list={task_list!r}: no such file (write one with `coa filter-tasks`)")
    wanted = {str(require(record, "task_id", path, row)) for row, record in iter_jsonl(path)}
    if not wanted:
        raise TaskDataError(path, 1, "task_id", "is never given: the task list is empty")
    known = {t.task_id for t in tasks}
    missing = sorted(wanted - known)
    if missing:
        raise ValueError(f"task_list {path}: {len(missing)} task id(s) are not among this env's {len(tasks)} "
                         f"tasks (another split or data file?), e.g. {missing[:3]}")
    return [t for t in tasks if t.task_id in wanted]


def open_family_runtime(config: Any) -> tuple[Any, Any]:
    """``(config, runtime)``: let a family start a live resource its tasks and tools depend on
    (the mini-web's server, whose port the OS picks). ``coa_envs.tasks.<family>.open_runtime
    (task_options)`` returns ``task_options`` and ``tool_overrides``, merged into the env
    config (:class:`~coa_envs.config.EnvConfig`); the env closes the runtime with itself.
    Families without ``open_runtime`` give ``(config, None)``."""
    import dataclasses

    opener = getattr(importlib.import_module(f"coa_envs.tasks.{config.family}"), "open_runtime", None)
    if opener is None:
        return config, None
    runtime = opener(dict(config.tasks))
    tools = {name: {**cfg, **runtime.tool_overrides.get(name, {})} for name, cfg in config.tools.items()}
    tasks = {**config.tasks, **runtime.task_options}
    return dataclasses.replace(config, tasks=tasks, tools=tools), runtime
