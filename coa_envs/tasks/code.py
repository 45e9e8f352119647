"""Code family loader: LiveCodeBench in the seed's verl parquet and in the official jsonl.

Tests end up in ``Task.tests`` as one JSON-friendly dict, whatever the source:

* ``{"kind": "stdin", "cases": [{"input": str, "output": str, "public": bool}, ...]}`` — run
  the program with ``input`` on stdin, compare stdout with ``output``;
* ``{"kind": "functional", "func_name": str, "cases": [...]}`` — LeetCode tests: ``input``
  holds one JSON value per line (the arguments), ``output`` one JSON value (the return value
  of ``Solution().<func_name>(*args)``). The verl files' assert snippets are rewritten into
  such cases at load (:mod:`coa_envs.tasks.code_asserts`): an assert never runs inside the
  model's program.

``public`` says whether a case is one of the examples printed in the problem statement,
which the model sees (a lookup table of them passes): the official release files say so
(``public_test_cases`` / ``private_test_cases``); for a verl file a case is public when its
input appears in the statement. **The shipped v4/v5 files carry only public tests** (examples
only): the reward's details and ``coa eval``'s summary flag such scores. To score on private
tests, pass the official LiveCodeBench release files (a ``test*.jsonl`` file or the folder of
them from huggingface.co/datasets/livecodebench/code_generation_lite) as ``data_path``, with
``subset="shipped"`` to keep the problems of the shipped v4/v5 subset.

The verl column ``reward_model.ground_truth`` is a JSON *string* inside a dict (sometimes the
dict itself arrives as a JSON string); both layers are decoded here, once, so rewards never
see raw strings (the seed's reward code crashed on exactly that).
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

from coa_envs.tasks import TaskDataError, iter_jsonl, require, resolve_path, shipped_or_given
from coa_envs.tasks.code_asserts import AssertRewriteError, rewrite_asserts
from coa_envs.tasks.hygiene import refuse_trivial_tests
from coa_envs.tasks.split import TEST_SET_NOTE, benchmark_split
from coa_envs.types import Task

__all__ = ["DATASETS", "SPLIT_NOTE", "count_tests", "load_tasks", "parse_ground_truth"]

SPLIT_NOTE = TEST_SET_NOTE
"""What ``coa list`` says about this family's ``split`` option (:mod:`coa_envs.tasks.split`)."""

DATASETS = {
    "v4": "pkg:data/code/livecodebench_v4.parquet",
    "v5": "pkg:data/code/livecodebench_v5.parquet",
}
_TASK_MARKER = "\nTask:"


def load_tasks(
    path: str | None = None,
    dataset: str = "v5",
    format: str = "auto",
    limit: int | None = None,
    platform: str | None = None,
    split: str = "all",
    subset: str = "all",
    pool: bool = False,
) -> list[Task]:
    """Load LiveCodeBench tasks.

    ``path`` None uses the shipped verl file of ``dataset`` (``v4`` | ``v5``; examples only).
    ``path`` may be a verl parquet, an official LiveCodeBench release file (``test5.jsonl``; a
    record may add ``oracle_actions``, a list of CoA actions that solve it, for the oracle agent)
    or a folder of release files (every ``test*.jsonl`` in it). ``format`` is ``auto`` (by
    suffix), ``parquet`` or ``jsonl``. ``subset="shipped"`` keeps the problems of the shipped
    ``dataset`` subset (all of them must be in ``path``): the same problems, scored on the
    release's private tests. ``platform`` keeps only ``atcoder``/``leetcode``/... tasks.
    ``split``: the shipped problems are a test set (``train`` is refused); any other ``path``
    is a pool that ``split`` partitions (:mod:`coa_envs.tasks.split`).
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown LiveCodeBench dataset {dataset!r}; allowed: {sorted(DATASETS)}")
    if subset not in ("all", "shipped"):
        raise ValueError(f"code: subset={subset!r} is not valid; allowed: all, shipped")
    shipped = path is None
    resolved = shipped_or_given(path or None, dataset, DATASETS, "code",
                                "pass data_path= a verl parquet or an official LiveCodeBench jsonl: "
                                "huggingface.co/datasets/livecodebench/code_generation_lite")
    tasks = [t for file in _files(resolved) for t in _load_file(file, format, dataset)]
    tasks = refuse_trivial_tests(tasks, f"code {dataset} ({resolved})")
    if subset == "shipped" and not shipped:
        tasks = _shipped_subset(tasks, dataset, resolved)
    if platform is not None:
        tasks = [t for t in tasks if t.metadata.get("platform") == platform]
    hint = "A code training file is an official LiveCodeBench-style jsonl or a verl parquet."
    benchmark = shipped or subset == "shipped"  # the shipped problems, wherever they were read from
    what = f"LiveCodeBench {dataset}" if benchmark else f"code file {resolved}"
    tasks = benchmark_split(tasks, split, what=what, data_file=not benchmark, pool=pool, family_hint=hint)
    return tasks[:limit] if limit else tasks


def _files(resolved: Path) -> list[Path]:
    if not resolved.is_dir():
        return [resolved]
    files = sorted(resolved.glob("test*.jsonl"), key=lambda f: (len(f.name), f.name))  # test, test2, ...
    if not files:
        raise FileNotFoundError(f"{resolved} holds no official LiveCodeBench release file (test*.jsonl)")
    return files


def _load_file(file: Path, format: str, dataset: str) -> list[Task]:
    if format == "auto":
        format = "parquet" if file.suffix == ".parquet" else "jsonl"
    if format == "parquet":
        return _load_verl_parquet(file, dataset)
    if format == "jsonl":
        return _load_official_jsonl(file, dataset)
    raise ValueError(f"unknown code format {format!r}; allowed: auto, parquet, jsonl")


def _shipped_subset(tasks: list[Task], dataset: str, source: Path) -> list[Task]:
    """The problems of the shipped ``dataset`` file, in its order, taken from ``tasks``."""
    wanted = [t.task_id for t in _load_verl_parquet(resolve_path(DATASETS[dataset]), dataset)]  # type: ignore[arg-type]
    found = {t.task_id: t for t in tasks}
    missing = [i for i in wanted if i not in found]
    if missing:
        raise ValueError(f"subset=shipped: {len(missing)} of the {len(wanted)} LiveCodeBench {dataset} problems "
                         f"are not in {source} (e.g. {missing[:3]}); give the folder of all release files")
    return [found[i] for i in wanted]


def count_tests(tests: Any) -> dict[str, int]:
    """``{"total", "public", "private"}`` test cases of a task's ``tests`` dict."""
    cases = tests.get("cases") or [] if isinstance(tests, dict) else []
    public = sum(1 for c in cases if c.get("public"))
    return {"total": len(cases), "public": public, "private": len(cases) - public}


def _squeeze(text: str) -> str:
    return "".join(text.split())


def _shown_in(statement: str, case: dict[str, str], kind: str) -> bool:
    """Whether a verl case is one of the statement's examples: its input appears in it."""
    if kind == "stdin":
        return _squeeze(case["input"]) in statement
    for line in case["input"].split("\n"):
        try:
            value = json.loads(line)
        except ValueError:
            value = line
        forms = {_squeeze(line), _squeeze(value) if isinstance(value, str) else _squeeze(repr(value))}
        if not any(form and form in statement for form in forms):
            return False
    return True


def _json_value(value: Any, file: Path, row: int, field: str) -> Any:
    """Decode ``value`` while it is a JSON string (handles JSON-in-JSON)."""
    for _ in range(3):
        if not isinstance(value, str):
            return value
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TaskDataError(file, row, field, "is not valid JSON") from None
    return value


def parse_ground_truth(
    reward_model: Any, file: Path | str = "<memory>", row: int = 0, func_name: str | None = None,
    statement: str | None = None,
) -> dict[str, Any]:
    """Turn a verl ``reward_model`` (dict or JSON string) into our ``tests`` dict.

    Assert snippets become ``functional`` cases (:mod:`coa_envs.tasks.code_asserts`); a case
    is ``public`` when its input appears in ``statement`` (all are, without a statement).
    """
    file = Path(file)
    reward_model = _json_value(reward_model, file, row, "reward_model")
    if not isinstance(reward_model, dict):
        raise TaskDataError(file, row, "reward_model", "is not an object")
    truth = _json_value(require(reward_model, "ground_truth", file, row), file, row, "ground_truth")
    if not isinstance(truth, dict):
        raise TaskDataError(file, row, "reward_model.ground_truth", "is not an object")
    if "functional" in truth:
        snippets = truth["functional"]
        snippets = [snippets] if isinstance(snippets, str) else snippets
        if not snippets or not all(isinstance(s, str) and s.strip() for s in snippets):
            raise TaskDataError(file, row, "reward_model.ground_truth.functional", "is empty")
        try:
            name, cases = rewrite_asserts(list(snippets), func_name)
        except AssertRewriteError as exc:
            raise TaskDataError(file, row, "reward_model.ground_truth.functional",
                                f"cannot be compared outside the program: {exc}") from None
        tests: dict[str, Any] = {"kind": "functional", "func_name": name, "cases": cases}
    else:
        inputs = require(truth, "stdin", file, row)
        outputs = require(truth, "expected_output", file, row)
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise TaskDataError(file, row, "reward_model.ground_truth", "needs equal stdin/expected_output lists")
        if not inputs:
            raise TaskDataError(file, row, "reward_model.ground_truth.stdin", "is empty")
        cases = [{"input": str(i), "output": str(o)} for i, o in zip(inputs, outputs, strict=True)]
        tests = {"kind": "stdin", "cases": cases}
    squeezed = None if statement is None else _squeeze(statement)
    for case in tests["cases"]:
        case["public"] = squeezed is None or _shown_in(squeezed, case, tests["kind"])
    return tests


def _load_verl_parquet(file: Path, dataset: str) -> list[Task]:
    import pyarrow.parquet as pq

    tasks = []
    for row_number, row in enumerate(pq.read_table(file).to_pylist(), start=1):
        prompt = row.get("prompt")
        if not isinstance(prompt, list) or not prompt or not isinstance(prompt[-1], dict):
            raise TaskDataError(file, row_number, "prompt", "is not a list of chat messages")
        content = require(prompt[-1], "content", file, row_number)
        at = content.rfind(_TASK_MARKER)
        question = content[at + len(_TASK_MARKER) :] if at >= 0 else content
        extra = row.get("extra_info") or {}
        meta = _json_value(extra.get("metadata") or "{}", file, row_number, "extra_info.metadata")
        func_name = meta.get("func_name") if isinstance(meta, dict) else None
        tests = parse_ground_truth(row.get("reward_model"), file, row_number, func_name, statement=content)
        source = row.get("data_source") or f"livecodebench_{dataset}"
        task_id = str(extra.get("index") or f"{source}-{row_number - 1}")
        tasks.append(
            Task(
                task_id=task_id,
                question=question.strip(),
                tests=tests,
                metadata={
                    "data_source": source,
                    "platform": extra.get("platform"),
                    "difficulty": extra.get("difficulty"),
                    "contest_date": extra.get("contest_date"),
                    "title": extra.get("question_title"),
                    "starter_code": extra.get("starter_code") or "",
                    "func_name": func_name,
                    "source_prompt": content,
                },
            )
        )
    return tasks


class _StringsOnly(pickle.Unpickler):
    """The official release pickles its private tests (a str): refuse anything else."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from test data")


def _decode_cases(value: Any, file: Path, row: int, field: str) -> list[dict[str, Any]]:
    if value in (None, "", []):
        return []
    if isinstance(value, str) and not value.lstrip().startswith("["):
        try:  # newer releases: base64(zlib(pickle(json string)))
            raw = zlib.decompress(base64.b64decode(value))
            value = _StringsOnly(io.BytesIO(raw)).load()
        except Exception as exc:
            raise TaskDataError(file, row, field, f"cannot be decoded ({type(exc).__name__})") from None
    cases = _json_value(value, file, row, field)
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise TaskDataError(file, row, field, "is not a list of test objects")
    for c in cases:
        if "input" not in c or "output" not in c:
            raise TaskDataError(file, row, field, "has a test without input/output")
    return cases


def _load_official_jsonl(file: Path, dataset: str) -> list[Task]:
    tasks = []
    for row_number, record in iter_jsonl(file):
        content = require(record, "question_content", file, row_number)
        question_id = str(require(record, "question_id", file, row_number))
        public = _decode_cases(record.get("public_test_cases"), file, row_number, "public_test_cases")
        private = _decode_cases(record.get("private_test_cases"), file, row_number, "private_test_cases")
        cases = public + private
        if not cases:
            raise TaskDataError(file, row_number, "public_test_cases")
        meta = _json_value(record.get("metadata") or "{}", file, row_number, "metadata")
        func_name = meta.get("func_name") if isinstance(meta, dict) else None
        functional = any(c.get("testtype") == "functional" for c in cases)
        if functional and not func_name:
            raise TaskDataError(file, row_number, "metadata.func_name")
        pairs = [{"input": str(c["input"]), "output": str(c["output"]), "public": index < len(public)}
                 for index, c in enumerate(cases)]
        tests = (
            {"kind": "functional", "func_name": func_name, "cases": pairs}
            if functional
            else {"kind": "stdin", "cases": pairs}
        )
        starter = record.get("starter_code") or ""
        question = content.strip()
        if starter:
            question += f"\n\nYou will use the following starter code to write the solution:\n```python\n{starter}\n```"
        tasks.append(
            Task(
                task_id=question_id,
                question=question,
                tests=tests,
                metadata={
                    "data_source": f"livecodebench_{dataset}",
                    "platform": record.get("platform"),
                    "difficulty": record.get("difficulty"),
                    "contest_date": record.get("contest_date"),
                    "title": record.get("question_title"),
                    "starter_code": starter,
                    "func_name": func_name,
                    **_oracle_actions(record, file, row_number),
                },
            )
        )
    return tasks


def _oracle_actions(record: dict[str, Any], file: Path, row: int) -> dict[str, Any]:
    """Optional extension of the official format: a scripted solution for the oracle agent."""
    actions = record.get("oracle_actions")
    if actions is None:
        return {}
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise TaskDataError(file, row, "oracle_actions", "is not a list of action strings")
    return {"oracle_actions": actions}
