"""Open-domain and multi-hop QA tasks (NQ, HotpotQA, 2Wiki, MuSiQue, Bamboogle, TriviaQA, PopQA).

Where the questions come from, first match wins:
1. ``path`` -- a jsonl/json/parquet file, a directory in FlashRAG's layout
   (``<dir>/<name>/<split>.jsonl`` or ``<dir>/<split>.jsonl``) or a directory written by
   ``datasets.Dataset.save_to_disk`` (``pkg:`` and ``COA_DATA_DIR``-relative names work);
2. ``$COA_DATA_DIR`` in FlashRAG's layout (``<name>/<split>.jsonl``) or as ``<dataset>_<split>.jsonl``;
3. data shipped with the package (NQ: the 3,610 open-NQ questions the seed evaluates on);
4. ``source="hf"``: FlashRAG's collection via ``datasets`` (needs the internet or a filled HF
   cache; opt-in so a hermetic run never blocks on the network);
5. otherwise a :class:`DataNotFoundError` that says where to get the data. ``allow_sample=True``
   instead loads a handful of hand-written questions in FlashRAG format (a smoke test of the
   plumbing, not the benchmark; logged as such).

``source_split`` names the file's split in FlashRAG's layout (``train``/``dev``/``test``; each
dataset has a default). ``split`` (``train``/``test``/``all``) is the training/held-out
partition of whatever was loaded: every QA source, the shipped NQ file included, is a pool
split by :func:`coa_envs.tasks.split.is_heldout` (a fixed, hashed 80/20 by question).

Row formats (``format="auto"`` detects per row): FlashRAG/Search-R1 (``question``,
``golden_answers``), the seed's (``question``, ``answer`` as a list), HotpotQA/2Wiki
(``answer`` string), MuSiQue (``answer`` + ``answer_aliases``), PopQA (``possible_answers``,
a list or a JSON-encoded list), TriviaQA-style ``answers``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coa_envs.tasks import DataNotFoundError, TaskDataError, iter_jsonl, require, resolve_path
from coa_envs.tasks.hygiene import refuse_empty_golds, squad
from coa_envs.tasks.split import POOL_NOTE, check_split, in_split
from coa_envs.types import Task

__all__ = ["DATASETS", "FORMATS", "SPLIT_NOTE", "load_tasks", "row_to_task"]

SPLIT_NOTE = POOL_NOTE
"""What ``coa list`` says about this family's ``split`` option (:mod:`coa_envs.tasks.split`)."""

log = logging.getLogger(__name__)

# dataset -> (FlashRAG directory name, default source split)
DATASETS: dict[str, tuple[str, str]] = {
    "nq": ("nq", "test"),
    "hotpotqa": ("hotpotqa", "dev"),
    "2wiki": ("2wikimultihopqa", "dev"),
    "musique": ("musique", "dev"),
    "bamboogle": ("bamboogle", "test"),
    "triviaqa": ("triviaqa", "test"),
    "popqa": ("popqa", "test"),
}
FORMATS = ("auto", "flashrag", "seed", "hotpotqa", "musique", "popqa", "triviaqa")
_HF_REPO = "RUC-NLPIR/FlashRAG_datasets"
_SHIPPED = {"nq": "pkg:data/mhqa/nq_full.jsonl"}
_SAMPLE = "pkg:data/mhqa/samples/{dataset}.jsonl"


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):  # PopQA stores its aliases as a JSON-encoded list
            try:
                decoded = json.loads(text)
            except json.JSONDecodeError:
                return [value]
            return [str(v) for v in decoded]
        return [value]
    if isinstance(value, dict):  # TriviaQA (HF) keeps aliases under "aliases"/"value"
        return _as_list(value.get("aliases") or value.get("value"))
    return [str(v) for v in value]


def _detect(row: dict[str, Any]) -> str:
    if "golden_answers" in row:
        return "flashrag"
    if "possible_answers" in row:
        return "popqa"
    if "answer_aliases" in row:
        return "musique"
    if "answers" in row:
        return "triviaqa"
    if isinstance(row.get("answer"), list):
        return "seed"
    return "hotpotqa"


def _golds(row: dict[str, Any], fmt: str, file: str | Path, number: int) -> list[str]:
    field = {"flashrag": "golden_answers", "popqa": "possible_answers", "triviaqa": "answers"}.get(fmt, "answer")
    golds = _as_list(require(row, field, file, number))
    if fmt == "musique":
        golds += _as_list(row.get("answer_aliases"))
    golds = [g for g in dict.fromkeys(g.strip() for g in golds) if g]
    if not golds:
        raise TaskDataError(file, number, field, "has no non-empty answer")
    return golds


def row_to_task(row: dict[str, Any], *, fmt: str, dataset: str, source_split: str, file: str | Path,
                number: int) -> Task:
    """One source row -> Task; a missing field raises :class:`TaskDataError` naming file/row/field."""
    if fmt not in FORMATS:
        raise ValueError(f"mhqa: format must be one of {FORMATS}, not {fmt!r}")
    row_format = _detect(row) if fmt == "auto" else fmt
    question = str(require(row, "question", file, number)).strip()
    golds = _golds(row, row_format, file, number)
    raw_id = next((row[key] for key in ("id", "_id", "qid", "question_id") if row.get(key) is not None), None)
    task_id = f"{dataset}-{raw_id}" if raw_id is not None else f"{dataset}-{source_split}-{number:05d}"
    keep = {k: v for k, v in row.items() if k not in ("question", "golden_answers", "answer")}
    metadata = {
        "dataset": dataset,
        "source_split": source_split,
        "source": str(file),
        "row": number,
        "format": row_format,
        **{k: v for k, v in keep.items() if isinstance(v, str | int | float | bool)},
    }
    return Task(task_id=task_id, question=question, gold=tuple(golds), metadata=metadata)


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        yield from iter_jsonl(path)
    elif suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = data.get("data", data) if isinstance(data, dict) else data
        if not isinstance(rows, list):
            raise TaskDataError(path, 0, "<file>", "is not a JSON list of questions")
        yield from enumerate(rows, start=1)
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from enumerate(pq.read_table(path).to_pylist(), start=1)
    else:
        raise ValueError(f"mhqa: unsupported data file {path} (use .jsonl, .json or .parquet)")


def _from_data_dir(dataset: str, split: str) -> Path | None:
    data_dir = os.environ.get("COA_DATA_DIR")
    if not data_dir:
        return None
    flashrag_name = DATASETS[dataset][0]
    root = Path(data_dir)
    for candidate in (
        root / flashrag_name / f"{split}.jsonl",
        root / "mhqa" / f"{dataset}_{split}.jsonl",
        root / f"{dataset}_{split}.jsonl",
        root / f"{dataset}.jsonl",
    ):
        if candidate.is_file():
            return candidate
    return None


def _from_hf(dataset: str, split: str, repo: str) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as exc:
        raise DataNotFoundError("source='hf' needs `pip install datasets`") from exc
    try:
        return list(datasets.load_dataset(repo, DATASETS[dataset][0], split=split))
    except Exception as exc:  # offline, unknown config/split, hub errors: all mean "no data"
        raise DataNotFoundError(
            f"could not load {repo} [{DATASETS[dataset][0]}] split {split!r} with datasets "
            f"({type(exc).__name__}: {str(exc)[:300]}). Needs the internet or a filled HF cache; "
            f"{_where_to_get(dataset, split)}"
        ) from exc


def _from_directory(root: Path, dataset: str, split: str) -> tuple[Path, Iterator[tuple[int, dict[str, Any]]]]:
    """A FlashRAG-layout folder, or a ``datasets`` folder written by ``save_to_disk``."""
    if (root / "dataset_info.json").is_file() or (root / "dataset_dict.json").is_file():
        try:
            import datasets
        except ImportError as exc:
            raise DataNotFoundError(f"{root} is a Hugging Face datasets folder: `pip install datasets`") from exc
        loaded = datasets.load_from_disk(str(root))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise DataNotFoundError(f"{root} has splits {sorted(loaded)}, not {split!r} "
                                        "(task_options source_split=...)")
            loaded = loaded[split]
        return root, iter(enumerate(loaded, start=1))
    for candidate in (root / DATASETS[dataset][0] / f"{split}.jsonl", root / f"{split}.jsonl"):
        if candidate.is_file():
            return candidate, _rows(candidate)
    raise DataNotFoundError(
        f"{root} is a folder without {DATASETS[dataset][0]}/{split}.jsonl or {split}.jsonl "
        f"(FlashRAG layout) and is not a datasets save_to_disk folder"
    )


def _where_to_get(dataset: str, split: str) -> str:
    name = DATASETS[dataset][0]
    return (
        f"no {dataset} data found. Download FlashRAG's {name}/{split}.jsonl (Hugging Face dataset "
        f"{_HF_REPO}) and pass data_path=... to gym.make, or put it at $COA_DATA_DIR/{name}/{split}.jsonl, "
        f"or use task_options={{'source': 'hf'}} when online "
        f"(task_options={{'allow_sample': True}} runs a few hand-written questions as a smoke test)."
    )


def load_tasks(
    path: str | None = None,
    *,
    format: str = "auto",
    dataset: str = "nq",
    source_split: str | None = None,
    source: str = "auto",
    allow_sample: bool = False,
    limit: int | None = None,
    hf_repo: str = _HF_REPO,
    split: str = "all",
) -> list[Task]:
    """Load one QA benchmark as Tasks (see the module docstring for the search order)."""
    check_split(split, f"mhqa {dataset}")
    if dataset not in DATASETS:
        raise ValueError(f"mhqa: dataset must be one of {sorted(DATASETS)}, not {dataset!r}")
    if source not in ("auto", "hf"):
        raise ValueError(f"mhqa: source must be 'auto' or 'hf', not {source!r}")
    if source_split == "all":
        raise ValueError("mhqa: source_split names a file split (train/dev/test); the training/"
                         "held-out partition is split=train|test|all")
    split_name = source_split or DATASETS[dataset][1]
    rows: Iterator[tuple[int, dict[str, Any]]] | list[tuple[int, dict[str, Any]]]
    file: Path | str | None
    if path is not None:
        file = resolve_path(path)
        if file is not None and file.is_dir():
            file, rows = _from_directory(file, dataset, split_name)
        elif file is None or not file.is_file():
            raise DataNotFoundError(f"mhqa data file not found: {path}")
        else:
            rows = _rows(file)
    elif source == "hf":
        file = f"hf://{hf_repo}/{DATASETS[dataset][0]}/{split_name}"
        rows = list(enumerate(_from_hf(dataset, split_name, hf_repo), start=1))
    else:
        found = _from_data_dir(dataset, split_name)
        if found is None and dataset in _SHIPPED:
            found = resolve_path(_SHIPPED[dataset])
        if found is None:
            if not allow_sample:
                raise DataNotFoundError(_where_to_get(dataset, split_name))
            found = resolve_path(_SAMPLE.format(dataset=dataset))
            log.warning(
                "mhqa: using the small built-in %s SAMPLE (hand-written questions, not the benchmark): %s",
                dataset,
                _where_to_get(dataset, split_name),
            )
        file = found
        rows = _rows(found)
    tasks = []
    for number, row in rows:
        if not isinstance(row, dict):
            raise TaskDataError(file, number, "<row>", "is not an object")
        task = row_to_task(row, fmt=format, dataset=dataset, source_split=split_name, file=file, number=number)
        if not in_split(task.question, split):
            continue
        tasks.append(task)
        if limit is not None and len(tasks) >= limit:
            break
    return refuse_empty_golds(tasks, squad, f"mhqa {dataset} ({file})")
