"""Shared pieces of the web-family loaders: generic question/answer records and data how-tos.

GAIA, BrowseComp and HLE cannot ship with the package (gated access or canary strings), so
a loader that finds no data raises :class:`~coa_envs.tasks.DataNotFoundError` whose message
is the whole recipe: where to get the data, where to put it, how to point the env at it.
This module also reads the simple JSON list ``[{"question": ..., "answer": ...}, ...]``
(or JSON Lines of such objects) that the seed used for every web benchmark.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from coa_envs.tasks import DataNotFoundError, TaskDataError, iter_jsonl
from coa_envs.types import Task

__all__ = [
    "ANSWER_KEYS",
    "HOW_TO_GET",
    "QUESTION_KEYS",
    "data_dir_candidates",
    "hf_authorised",
    "missing_data_error",
    "read_records",
    "record_to_task",
    "select_tasks",
]

# Field names seen in the simple formats, in order of preference.
QUESTION_KEYS = ("question", "Question", "problem", "prompt", "query")
ANSWER_KEYS = ("answer", "Final answer", "final_answer", "answers", "golden_answers", "gold")
_ID_KEYS = ("task_id", "id", "qid", "question_id")
_FILE_KEYS = ("file_name", "file_path", "files")

HOW_TO_GET: dict[str, str] = {
    "gaia": (
        "GAIA is gated on the Hugging Face Hub and is not shipped with coa-envs.\n"
        "  1. Accept the terms at https://huggingface.co/datasets/gaia-benchmark/GAIA\n"
        "  2. huggingface-cli login   (or export HF_TOKEN=...)\n"
        "  3. huggingface-cli download gaia-benchmark/GAIA --repo-type dataset "
        "--local-dir $COA_DATA_DIR/GAIA\n"
        "Then either set COA_DATA_DIR (the loader looks for "
        "$COA_DATA_DIR/GAIA/2023/validation/metadata.jsonl and its attached files) or pass "
        "gym.make('coa/GAIA-v1', data_path='/path/to/GAIA'). With a token and the internet the "
        "loader downloads the validation split itself. A JSON list "
        "[{\"question\": ..., \"answer\": ...}] also works as data_path."
    ),
    "browsecomp": (
        "BrowseComp carries a canary and is not shipped with coa-envs.\n"
        "  Download the official encrypted CSV (columns problem, answer, canary):\n"
        "  https://openaipublic.blob.core.windows.net/simple-evals/browse_comp_test_set.csv\n"
        "Save it as $COA_DATA_DIR/browse_comp_test_set.csv (set COA_DATA_DIR) or pass "
        "gym.make('coa/BrowseComp-v1', data_path='/path/to/browse_comp_test_set.csv'); rows are "
        "decrypted with their canary on load. A JSON list [{\"question\": ..., \"answer\": ...}] "
        "also works as data_path."
    ),
    "hle": (
        "Humanity's Last Exam is gated on the Hugging Face Hub and is not shipped with coa-envs.\n"
        "  1. Accept the terms at https://huggingface.co/datasets/cais/hle\n"
        "  2. huggingface-cli login   (or export HF_TOKEN=...)\n"
        "  3. huggingface-cli download cais/hle --repo-type dataset --local-dir $COA_DATA_DIR/hle\n"
        "Then set COA_DATA_DIR (the loader reads $COA_DATA_DIR/hle/data/test-*.parquet) or pass "
        "gym.make('coa/HLE-v1', data_path='/path/to/hle' or a .parquet/.jsonl file). With "
        "`datasets` installed, a token and the internet the loader fetches cais/hle itself."
    ),
}


def missing_data_error(dataset: str, tried: Iterable[str] = ()) -> DataNotFoundError:
    """The error a user sees when an unshippable benchmark has no local copy."""
    tried_text = "".join(f"\n  looked in: {place}" for place in tried) or (
        "\n  (no data_path given and COA_DATA_DIR is not set)"
    )
    return DataNotFoundError(f"No {dataset} data found.{tried_text}\n{HOW_TO_GET[dataset]}")


def data_dir_candidates(*names: str) -> list[Path]:
    """``$COA_DATA_DIR/<name>`` for each name (empty when the variable is unset)."""
    root = os.environ.get("COA_DATA_DIR")
    return [Path(root).expanduser() / name for name in names] if root else []


def hf_authorised() -> bool:
    """True only when a Hub download could succeed: hub installed, not offline, token present.

    Checked before any network call so that a machine without a token (CI, this sandbox)
    fails fast with the how-to message instead of waiting on connection retries.
    """
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or os.environ.get(
        "COA_NO_HF_DOWNLOAD"
    ):
        return False
    try:
        from huggingface_hub import get_token
    except ImportError:
        return False
    return bool(get_token())


def read_records(path: Path) -> list[tuple[int | str, dict[str, Any]]]:
    """Rows of a ``.json`` list (or ``{"data": [...]}``) or a ``.jsonl`` file with row numbers."""
    if path.suffix == ".jsonl":
        return list(iter_jsonl(path))
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TaskDataError(path, exc.lineno, "<file>", f"is not valid JSON ({exc.msg})") from None
    if isinstance(document, Mapping):
        document = document.get("data", document.get("tasks"))
    if not isinstance(document, list):
        raise TaskDataError(path, 0, "<file>", "is not a JSON list of task objects")
    rows: list[tuple[int | str, dict[str, Any]]] = []
    for index, record in enumerate(document):
        if not isinstance(record, dict):
            raise TaskDataError(path, index, "<row>", "is not a JSON object")
        rows.append((index, record))
    return rows


def _first(record: Mapping[str, Any], keys: Iterable[str]) -> tuple[str | None, Any]:
    for key in keys:
        value = record.get(key)
        if value is not None and value != "" and value != []:
            return key, value
    return None, None


def _gold(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value if str(v).strip())
    return (str(value),)


def record_to_task(
    record: Mapping[str, Any],
    *,
    file: Path,
    row: int | str,
    dataset: str,
    base_dir: Path | None = None,
) -> Task:
    """Turn one simple-format record into a Task; attachments resolve against ``base_dir``."""
    q_key, question = _first(record, QUESTION_KEYS)
    if q_key is None:
        raise TaskDataError(file, row, QUESTION_KEYS[0])
    a_key, answer = _first(record, ANSWER_KEYS)
    if a_key is None:
        raise TaskDataError(file, row, ANSWER_KEYS[0])
    _, given_id = _first(record, _ID_KEYS)
    task_id = str(given_id) if given_id is not None else f"{dataset}-{row}"
    files: list[str] = []
    _, attached = _first(record, _FILE_KEYS)
    for name in attached if isinstance(attached, list) else ([attached] if attached else []):
        candidate = Path(str(name))
        if not candidate.is_absolute() and base_dir is not None:
            candidate = base_dir / candidate
        files.append(str(candidate.resolve()))
    used = {q_key, a_key, *_ID_KEYS, *_FILE_KEYS}
    metadata = {k: v for k, v in record.items() if k not in used}
    metadata["dataset"] = dataset
    return Task(
        task_id=task_id,
        question=str(question),
        gold=_gold(answer),
        files=tuple(files),
        metadata=metadata,
    )


def select_tasks(tasks: list[Task], limit: int | None = None) -> list[Task]:
    """Apply the ``limit`` loader option (first N tasks, keeping file order)."""
    if limit is None:
        return tasks
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit={limit!r} is not valid; allowed: a positive integer")
    return tasks[:limit]
