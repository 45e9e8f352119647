"""Humanity's Last Exam loader: the HF parquet (or a JSON Lines export) of ``cais/hle``.

Rows carry ``id, question, answer, answer_type`` (``exactMatch`` | ``multipleChoice``) and
``image``: empty, or a ``data:image/...;base64,`` URI. Images are written once to a cache
folder (``$COA_CACHE_DIR`` or ``~/.cache/coa_envs``) so that ``Task.files`` holds a real
path a file tool can open; ``text_only=True`` drops image questions instead (the usual
text-only HLE subset). ``category`` keeps only some subjects.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from coa_envs.tasks import TaskDataError, iter_jsonl, require
from coa_envs.tasks.web_common import data_dir_candidates, hf_authorised, missing_data_error
from coa_envs.types import Task

__all__ = ["HLE_REPO", "image_cache_dir", "load_hle"]

HLE_REPO = "cais/hle"
_KEEP = ("answer_type", "category", "raw_subject", "author_name", "rationale")
_EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/jpg": ".jpg", "image/gif": ".gif",
               "image/webp": ".webp"}


def image_cache_dir() -> Path:
    root = os.environ.get("COA_CACHE_DIR") or Path.home() / ".cache" / "coa_envs"
    return Path(root) / "hle_images"


def _data_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(path.glob("data/test-*.parquet")) or sorted(path.glob("*.parquet"))
    return files or sorted(path.glob("*.jsonl"))


def _rows(files: list[Path]) -> Iterable[tuple[Path, int, dict[str, Any]]]:
    for file in files:
        if file.suffix == ".parquet":
            import pyarrow.parquet as pq

            columns = [c for c in pq.read_schema(file).names if c not in ("image_preview",
                                                                           "rationale_image")]
            for number, row in enumerate(pq.read_table(file, columns=columns).to_pylist(), 1):
                yield file, number, row
        else:
            for number, row in iter_jsonl(file):
                yield file, number, row


def _materialise_image(image: str, task_id: str, file: Path, row: int) -> tuple[tuple[str, ...],
                                                                              dict[str, str]]:
    """Data URIs become cached files; http(s) URLs are kept as metadata (fetched by tools)."""
    if not image:
        return (), {}
    if image.startswith(("http://", "https://")):
        return (), {"image_url": image}
    if not image.startswith("data:") or ";base64," not in image:
        raise TaskDataError(file, row, "image", "is neither a data: URI nor an http(s) URL")
    header, payload = image[5:].split(";base64,", 1)
    try:
        data = base64.b64decode(payload)
    except (binascii.Error, ValueError):
        raise TaskDataError(file, row, "image", "has invalid base64 data") from None
    digest = hashlib.sha256(data).hexdigest()[:16]
    safe_id = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in task_id)
    target = image_cache_dir() / f"{safe_id}-{digest}{_EXTENSIONS.get(header.lower(), '.bin')}"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(target.suffix + f".{os.getpid()}.part")
        partial.write_bytes(data)
        partial.replace(target)  # atomic: concurrent loaders never see half a file
    return (str(target),), {}


def _hle_task(record: Mapping[str, Any], file: Path, row: int) -> Task:
    task_id = str(require(record, "id", file, row))
    question = str(require(record, "question", file, row))
    answer = str(require(record, "answer", file, row))
    files, extra = _materialise_image(str(record.get("image") or ""), task_id, file, row)
    metadata = {"dataset": "hle", **{k: record[k] for k in _KEEP if record.get(k)}, **extra}
    return Task(task_id=task_id, question=question, gold=(answer,), files=files,
                metadata=metadata)


def _hub_rows() -> Iterable[tuple[Path, int, dict[str, Any]]] | None:
    if not hf_authorised():
        return None
    try:
        import datasets
    except ImportError:
        return None
    table = datasets.load_dataset(HLE_REPO, split="test")
    # Preview images are decoded Image features (PIL); the loader only needs the data URI.
    drop = [c for c in ("image_preview", "rationale_image") if c in table.column_names]
    if drop:
        table = table.remove_columns(drop)
    source = Path(f"hf://datasets/{HLE_REPO}")
    return ((source, number, dict(row)) for number, row in enumerate(table, 1))


def load_hle(path: Path | None, *, text_only: bool = False,
             category: str | list[str] | None = None) -> list[Task]:
    """Load HLE tasks; raise the how-to error when there is no local or Hub copy."""
    candidates = [path] if path is not None else data_dir_candidates("hle", "HLE")
    files = next((f for c in candidates if c.exists() and (f := _data_files(c))), None)
    rows = _rows(files) if files else (_hub_rows() if path is None else None)
    if rows is None:
        raise missing_data_error("hle", [str(c) for c in candidates])
    wanted = {category} if isinstance(category, str) else set(category or ())
    tasks = []
    for file, row, record in rows:
        if text_only and record.get("image"):
            continue
        if wanted and record.get("category") not in wanted:
            continue
        tasks.append(_hle_task(record, file, row))
    return tasks
