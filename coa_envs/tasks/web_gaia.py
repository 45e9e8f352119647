"""GAIA loader: the Hugging Face repository layout, with attachments, and GAIA levels.

Layout of ``gaia-benchmark/GAIA`` (what ``huggingface-cli download`` produces)::

    <root>/2023/validation/metadata.jsonl   # task_id, Question, Level, Final answer, file_name
    <root>/2023/validation/<file_name>      # attachments (xlsx, pdf, png, mp3, ...)

``metadata.parquet`` is read the same way. ``path`` may be the root, the split folder, the
metadata file itself, or a simple JSON list (see :mod:`coa_envs.tasks.web_common`).
Attachments become absolute paths in ``Task.files`` so file tools can open them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from coa_envs.tasks import TaskDataError, iter_jsonl, require
from coa_envs.tasks.web_common import (
    data_dir_candidates,
    hf_authorised,
    missing_data_error,
    read_records,
    record_to_task,
)
from coa_envs.types import Task

__all__ = ["GAIA_REPO", "SPLITS", "find_metadata", "load_gaia"]

GAIA_REPO = "gaia-benchmark/GAIA"
SPLITS = ("validation", "test")
_METADATA_NAMES = ("metadata.jsonl", "metadata.parquet")


def find_metadata(path: Path, split: str) -> Path | None:
    """The metadata file under ``path`` for ``split``, trying the layouts users end up with."""
    if path.is_file():
        return path
    for folder in (path / "2023" / split, path / split, path):
        for name in _METADATA_NAMES:
            if (folder / name).is_file():
                return folder / name
    return None


def _parse_levels(level: Any) -> set[int] | None:
    if level is None:
        return None
    values = level if isinstance(level, list | tuple | set) else [level]
    levels: set[int] = set()
    for value in values:
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = 0
        if number not in (1, 2, 3):
            raise ValueError(f"level={level!r} is not valid; allowed: 1, 2, 3 or a list of them")
        levels.add(number)
    return levels


def _metadata_rows(metadata: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    if metadata.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from enumerate(pq.read_table(metadata).to_pylist(), start=1)
    else:
        yield from iter_jsonl(metadata)


def _gaia_task(record: dict[str, Any], metadata: Path, row: int) -> Task:
    task_id = str(require(record, "task_id", metadata, row))
    question = str(require(record, "Question", metadata, row))
    answer = record.get("Final answer")
    if answer is None:
        raise TaskDataError(metadata, row, "Final answer")
    level = record.get("Level")
    files: tuple[str, ...] = ()
    file_name = record.get("file_name") or ""
    if file_name:
        attachment = metadata.parent / file_name
        if not attachment.is_file():
            raise TaskDataError(
                metadata, row, "file_name", f"names {attachment}, which does not exist"
            )
        files = (str(attachment.resolve()),)
    extra = {
        k: v
        for k, v in record.items()
        if k not in {"task_id", "Question", "Final answer", "file_name", "file_path", "Level"}
    }
    return Task(
        task_id=task_id,
        question=question,
        gold=(str(answer),),
        files=files,
        metadata={"dataset": "gaia", "level": int(level) if level is not None else None, **extra},
    )


def _with_level(task: Task) -> Task:
    """Simple lists may carry ``Level``/``level``; expose it as ``metadata["level"]`` (int)."""
    raw = task.metadata.get("level", task.metadata.get("Level"))
    try:
        level = int(raw) if raw is not None else None
    except (TypeError, ValueError):
        level = None
    return replace(task, metadata={**task.metadata, "level": level})


def _download(split: str) -> Path | None:
    if not hf_authorised():
        return None
    from huggingface_hub import snapshot_download

    root = snapshot_download(
        repo_id=GAIA_REPO, repo_type="dataset", allow_patterns=[f"2023/{split}/*"]
    )
    return Path(root)


def load_gaia(
    path: Path | None, *, split: str = "validation", level: Any = None
) -> list[Task]:
    """Load GAIA tasks (optionally only some levels); raise the how-to error without data."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not valid; allowed: {list(SPLITS)}")
    levels = _parse_levels(level)
    candidates = [path] if path is not None else data_dir_candidates("GAIA", "gaia")
    metadata = next(
        (m for c in candidates if c.exists() and (m := find_metadata(c, split))), None
    )
    if metadata is None and path is None:
        downloaded = _download(split)
        metadata = find_metadata(downloaded, split) if downloaded else None
    if metadata is None:
        raise missing_data_error("gaia", [str(c) for c in candidates])

    if metadata.name in _METADATA_NAMES:
        tasks = [_gaia_task(record, metadata, row) for row, record in _metadata_rows(metadata)]
    else:  # the simple JSON list the seed used
        tasks = [
            _with_level(record_to_task(record, file=metadata, row=row, dataset="gaia",
                                       base_dir=metadata.parent))
            for row, record in read_records(metadata)
        ]
    if levels is not None:
        tasks = [t for t in tasks if t.metadata.get("level") in levels]
    return tasks
