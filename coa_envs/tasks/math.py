"""Math family loader: the seed's verl parquet files and a plain ``question``/``answer`` jsonl.

In the verl files the prompt is one user message: the seed's instructions followed by
``Task:\\n<question>``. We keep only the question (our env renders its own system prompt)
and store the original prompt in ``metadata["source_prompt"]`` so it can be reproduced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coa_envs.tasks import TaskDataError, iter_jsonl, require, shipped_or_given
from coa_envs.tasks.hygiene import bare, refuse_empty_golds
from coa_envs.tasks.split import TEST_SET_NOTE, benchmark_split
from coa_envs.types import Task

__all__ = ["DATASETS", "SPLIT_NOTE", "load_tasks"]

SPLIT_NOTE = TEST_SET_NOTE
"""What ``coa list`` says about this family's ``split`` option (:mod:`coa_envs.tasks.split`)."""

DATASETS = {
    "aime24": "pkg:data/math/aime24.parquet",
    "aime25": "pkg:data/math/aime25.parquet",
    "amc23": "pkg:data/math/amc23.parquet",
    "math500": "pkg:data/math/math500.parquet",
    "olympiadbench": "pkg:data/math/OlympiadBench.parquet",
}

_TASK_MARKER = "\nTask:\n"
_TRAIN_FILE_HINT = "A math training file is JSONL rows {\"question\": ..., \"answer\": ...} or a verl parquet."


def load_tasks(
    path: str | None = None,
    dataset: str = "math500",
    format: str = "auto",
    limit: int | None = None,
    split: str = "all",
    pool: bool = False,
) -> list[Task]:
    """Load math tasks. The shipped benchmarks and a ``path`` of yours are test sets
    (``split="train"`` is refused); ``pool=True`` marks a ``path`` as a training pool that
    ``split`` partitions 80/20 (:mod:`coa_envs.tasks.split`)."""
    shipped = path is None
    resolved = shipped_or_given(path, dataset, DATASETS, "math", "data_path / --data: a JSONL of "
                                "{\"question\", \"answer\"} rows or a verl parquet")
    if format == "auto":
        format = "parquet" if resolved.suffix == ".parquet" else "jsonl"
    if format == "parquet":
        tasks = _load_verl_parquet(resolved, dataset)
    elif format == "jsonl":
        tasks = _load_jsonl(resolved, dataset)
    else:
        raise ValueError(f"unknown math format {format!r}; allowed: auto, parquet, jsonl")
    tasks = refuse_empty_golds(tasks, bare, f"math {dataset} ({resolved})")
    what = f"the math benchmark {dataset!r}" if shipped else f"math file {resolved}"
    tasks = benchmark_split(tasks, split, what=what, data_file=not shipped, pool=pool, family_hint=_TRAIN_FILE_HINT)
    return tasks[:limit] if limit else tasks


def _question_from_prompt(prompt: Any, file: Path, row: int) -> tuple[str, str]:
    if not isinstance(prompt, list) or not prompt:
        raise TaskDataError(file, row, "prompt", "is not a list of chat messages")
    user = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if not user or not isinstance(user[-1].get("content"), str):
        raise TaskDataError(file, row, "prompt", "has no user message")
    content = user[-1]["content"]
    at = content.rfind(_TASK_MARKER)
    question = content[at + len(_TASK_MARKER):] if at >= 0 else content
    return question.strip(), content


def _load_verl_parquet(file: Path, dataset: str) -> list[Task]:
    import pyarrow.parquet as pq

    rows = pq.read_table(file).to_pylist()
    tasks = []
    for row_number, row in enumerate(rows, start=1):
        question, source_prompt = _question_from_prompt(row.get("prompt"), file, row_number)
        reward_model = row.get("reward_model")
        if isinstance(reward_model, str):
            try:
                reward_model = json.loads(reward_model)
            except json.JSONDecodeError:
                raise TaskDataError(file, row_number, "reward_model", "is not JSON") from None
        if not isinstance(reward_model, dict):
            raise TaskDataError(file, row_number, "reward_model")
        gold = require(reward_model, "ground_truth", file, row_number)
        extra = row.get("extra_info") or {}
        index = extra.get("index", row_number - 1) if isinstance(extra, dict) else row_number - 1
        source = row.get("data_source") or dataset
        tasks.append(
            Task(
                task_id=f"{source}-{index}",
                question=question,
                gold=(str(gold),),
                metadata={"data_source": source, "source_prompt": source_prompt},
            )
        )
    return tasks


def _load_jsonl(file: Path, dataset: str) -> list[Task]:
    tasks = []
    for row_number, record in iter_jsonl(file):
        question = require(record, "question", file, row_number)
        answer = record.get("answer", record.get("answers", record.get("golden_answers")))
        if answer is None or answer == "" or answer == []:
            raise TaskDataError(file, row_number, "answer")
        gold = tuple(str(a) for a in answer) if isinstance(answer, list) else (str(answer),)
        task_id = str(record.get("id", record.get("task_id", f"{dataset}-{row_number - 1}")))
        tasks.append(Task(task_id=task_id, question=str(question), gold=gold, metadata={"data_source": dataset}))
    return tasks
