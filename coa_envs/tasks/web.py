"""Web family loader: GAIA, BrowseComp, HLE, WebWalkerQA and simple question/answer lists.

``load_tasks(path, format, dataset, ...)`` dispatches to the per-dataset readers:

==============  ==========================================  =================================
dataset         official format (``format="official"``)     shipped?
==============  ==========================================  =================================
``gaia``        HF repo layout ``2023/<split>/metadata.jsonl``  no (gated) -> how-to error
``browsecomp``  encrypted CSV ``problem, answer, canary``   no (canary) -> how-to error
``hle``         HF parquet / jsonl of ``cais/hle``          no (gated) -> how-to error
``webwalker``   JSON list with ``root_url``                 yes: ``pkg:data/web/webwalker_main.json``
``None``        simple JSON list / JSONL ``{question, answer}``  (needs ``path``)
==============  ==========================================  =================================

``format="auto"`` picks the official reader from what ``path`` is (a folder, ``.csv``,
``.parquet``, ``metadata.jsonl``...) and the simple reader for other ``.json``/``.jsonl``
files; ``format="json"`` forces the simple reader. With ``path=None`` the GAIA, BrowseComp
and HLE readers look under ``$COA_DATA_DIR`` and then (HF token + internet only) on the Hub.

The all-ids env test has no internet and no gated data; it passes
``data_path="tests/web_envs/fixtures/<dataset>..."`` (invented tasks in each official
format), see ``tests/web_envs/fixtures/README.md``.
"""

from __future__ import annotations

import json
from pathlib import Path

from coa_envs.tasks import DataNotFoundError, resolve_path
from coa_envs.tasks.hygiene import gaia, refuse_empty_golds
from coa_envs.tasks.split import TEST_SET_NOTE, benchmark_split
from coa_envs.tasks.web_browsecomp import load_browsecomp_csv
from coa_envs.tasks.web_common import read_records, record_to_task, select_tasks
from coa_envs.tasks.web_gaia import load_gaia
from coa_envs.tasks.web_hle import load_hle
from coa_envs.types import Task

__all__ = ["DATASETS", "FORMATS", "SPLIT_NOTE", "WEBWALKER_DEFAULT", "load_tasks"]

SPLIT_NOTE = TEST_SET_NOTE
"""What ``coa list`` says about this family's ``split`` option (:mod:`coa_envs.tasks.split`)."""

DATASETS = ("gaia", "browsecomp", "hle", "webwalker")
FORMATS = ("auto", "official", "json")
WEBWALKER_DEFAULT = "pkg:data/web/webwalker_main.json"


def _simple(path: Path, dataset: str) -> list[Task]:
    return [
        record_to_task(record, file=path, row=row, dataset=dataset, base_dir=path.parent)
        for row, record in read_records(path)
    ]


def _is_simple_file(path: Path | None) -> bool:
    """A ``.json``/``.jsonl`` question list (GAIA's own ``metadata.jsonl`` is not one)."""
    if path is None or not path.is_file() or path.suffix not in (".json", ".jsonl"):
        return False
    return path.name != "metadata.jsonl"


def _looks_like_hle_jsonl(path: Path) -> bool:
    with open(path, encoding="utf-8") as handle:
        first = next((line for line in handle if line.strip()), "{}")
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(record, dict) and "id" in record and "answer_type" in record


def _webwalker(path: Path, include_root_url: bool) -> list[Task]:
    tasks = []
    for task in _simple(path, "webwalker"):
        info = task.metadata.get("info") or {}
        root = task.metadata.get("root_url")
        question = task.question
        if include_root_url and root:
            question = f"{question}\n\nStart from this website: {root}"
        metadata = {**task.metadata, **{k: v for k, v in info.items() if k != "source_website"}}
        metadata.pop("info", None)
        metadata["source_website"] = list(info.get("source_website") or [])
        tasks.append(Task(task_id=task.task_id, question=question, gold=task.gold,
                          files=task.files, metadata=metadata))
    return tasks


def load_tasks(
    path: str | None = None,
    format: str = "auto",
    dataset: str | None = None,
    *,
    level: int | list[int] | None = None,
    source_split: str = "validation",
    text_only: bool = False,
    category: str | list[str] | None = None,
    include_root_url: bool = True,
    limit: int | None = None,
    split: str = "all",
    pool: bool = False,
) -> list[Task]:
    """Load web-family tasks.

    Options: ``level`` (GAIA 1-3 or a list), ``source_split`` (GAIA ``validation``/``test``),
    ``text_only``/``category`` (HLE), ``include_root_url`` (WebWalkerQA: append the site
    to start from to the question, as the benchmark gives it), ``limit`` (first N tasks),
    ``split`` (:mod:`coa_envs.tasks.split`: the benchmark, and a ``path`` of yours, is a test
    set and ``train`` is refused; ``pool=True`` marks a ``path`` as a training pool, split 80/20).
    """
    if format not in FORMATS:
        raise ValueError(f"format={format!r} is not valid; allowed: {list(FORMATS)}")
    if dataset is not None and dataset not in DATASETS:
        raise ValueError(f"dataset={dataset!r} is not valid; allowed: {list(DATASETS)} or None")
    resolved = resolve_path(path)
    if resolved is not None and not resolved.exists():
        raise DataNotFoundError(f"data_path {path!r} does not exist (resolved to {resolved})")

    simple = format == "json" or (format == "auto" and _is_simple_file(resolved))
    if dataset == "webwalker":
        file = resolved or resolve_path(WEBWALKER_DEFAULT)
        assert file is not None
        tasks = _webwalker(file, include_root_url)
    elif dataset == "gaia":  # the GAIA reader handles the HF layout and simple lists alike
        tasks = load_gaia(resolved, split=source_split, level=level)
    elif dataset == "browsecomp":
        use_simple = simple and resolved is not None
        tasks = _simple(resolved, "browsecomp") if use_simple else load_browsecomp_csv(resolved)
    elif dataset == "hle":
        official_jsonl = resolved is not None and resolved.suffix == ".jsonl" and (
            format != "json" and _looks_like_hle_jsonl(resolved))
        if simple and resolved is not None and not official_jsonl:
            tasks = _simple(resolved, "hle")
        else:
            tasks = load_hle(resolved, text_only=text_only, category=category)
    else:
        if resolved is None or not resolved.is_file():
            raise ValueError("dataset=None reads a simple JSON list and needs path=<file>")
        tasks = _simple(resolved, "web")
    tasks = refuse_empty_golds(tasks, gaia, f"web {dataset or 'file'} ({resolved or 'default location'})")
    hint = "A web training file is a JSON list or JSONL of {\"question\": ..., \"answer\": ...}."
    what = f"the {dataset} benchmark" if resolved is None else f"web file {resolved}"
    tasks = benchmark_split(tasks, split, what=what, data_file=resolved is not None, pool=pool, family_hint=hint)
    return select_tasks(tasks, limit)
