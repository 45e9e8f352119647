""" "All tests pass" reward for the code family, with every test run in the sandbox.

The answer is the content of ``<answer>``: the last fenced Python block in it (or the whole
text when there is no fence). Tests (see :mod:`coa_envs.tasks.code` for the three kinds) run
in parallel through the sandbox's default backend, whose warm pool absorbs them. Output is
compared line by line with whitespace normalised (and numbers compared as decimals, as the
official LiveCodeBench checker does). Score 1 only if every test passes; ``details`` holds
each test's verdict. Model code never runs in this process.
"""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal, InvalidOperation
from typing import Any

from coa_envs.types import RewardResult, Task
from sandbox import ExecResult, Limits, Status

__all__ = ["VERSION", "CodeTestsReward", "build", "extract_code", "outputs_match"]

VERSION = 1  # bump when the scores this term gives change (reported in reward_details)

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
# Names LeetCode-style solutions use without importing (``List[int]``, ``deque``...), as the
# official LiveCodeBench runner provides them.
PRELUDE = (
    "from typing import *\nfrom collections import *\nfrom functools import *\n"
    "from itertools import *\nfrom heapq import *\nfrom bisect import *\n"
    "import math, string, re, sys, heapq, bisect, collections, itertools, functools, random\n"
)
_FUNCTIONAL_DRIVER = """
import json as _coa_json, sys as _coa_sys
_coa_args = [_coa_json.loads(_l) for _l in _coa_sys.stdin.read().split("\\n") if _l.strip()]
_coa_target = Solution().{func} if "Solution" in globals() else globals()["{func}"]
print(_coa_json.dumps(_coa_target(*_coa_args)))
"""


def extract_code(answer: str) -> str | None:
    """The last fenced block (preferring python-tagged ones), else the bare text."""
    blocks = _FENCE_RE.findall(answer or "")
    python = [code for lang, code in blocks if lang.lower() in ("python", "py", "python3", "")]
    chosen = python or [code for _, code in blocks]
    if chosen:
        return chosen[-1].strip("\n") or None
    text = (answer or "").strip()
    return text or None


def _normalise(text: str) -> list[str]:
    lines = [" ".join(line.split()) for line in text.strip().splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _as_decimal(token: str) -> Decimal | None:
    try:
        return Decimal(token)
    except (InvalidOperation, ValueError):
        return None


def outputs_match(actual: str, expected: str) -> bool:
    """Equal after per-line whitespace normalisation; numeric tokens compared as decimals."""
    got, want = _normalise(actual), _normalise(expected)
    if got == want:
        return True
    if len(got) != len(want):
        return False
    for got_line, want_line in zip(got, want, strict=True):
        got_tokens, want_tokens = got_line.split(), want_line.split()
        if len(got_tokens) != len(want_tokens):
            return False
        for a, b in zip(got_tokens, want_tokens, strict=True):
            if a == b:
                continue
            da, db = _as_decimal(a), _as_decimal(b)
            if da is None or db is None or da != db:
                return False
    return True


def _json_equal(actual: str, expected: str) -> bool:
    try:
        got, want = json.loads(actual.strip().splitlines()[-1]), json.loads(expected)
    except (ValueError, IndexError):
        return False
    return _listify(got) == _listify(want)


def _listify(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_listify(v) for v in value]
    return value


class CodeTestsReward:
    """Reward 1 iff every test passes. ``backend``: ``default`` or a sandbox backend name."""

    def __init__(
        self,
        backend: str = "default",
        cpu_s: float = 6.0,
        wall_s: float = 12.0,
        memory_mb: int = 2048,
        max_parallel: int = 8,
        fail_fast: bool = False,
    ) -> None:
        self.backend = backend
        self.limits = Limits(cpu_s=cpu_s, wall_s=wall_s, memory_mb=memory_mb)
        self.max_parallel = max_parallel
        self.fail_fast = fail_fast
        self._runner: Any = None
        self._runner_lock = threading.Lock()

    def _run(self, code: str, stdin: str, limits: Limits) -> ExecResult:
        if self._runner is None:
            with self._runner_lock:  # tests of one answer start in parallel: build the backend once
                if self._runner is None:
                    if self.backend == "default":
                        import sandbox

                        self._runner = sandbox.run
                    else:
                        from sandbox.backends import get_backend

                        self._runner = get_backend(self.backend).run
        return self._runner(code, stdin=stdin, limits=limits)

    def _safe_run(self, code: str, stdin: str, limits: Limits) -> ExecResult | str:
        """The run's result, or the text of the error when the sandbox itself failed."""
        try:
            return self._run(code, stdin, limits)
        except Exception as exc:  # a broken sandbox fails the test, it never raises into the env
            return f"{type(exc).__name__}: {exc}"

    def _jobs(self, code: str, tests: dict[str, Any]) -> list[tuple[str, str, str]]:
        """(program, stdin, expected) per test; expected "" for assert-style tests."""
        kind = tests.get("kind")
        if kind == "stdin":
            return [(code, c["input"], c["output"]) for c in tests["cases"]]
        if kind == "functional":
            program = PRELUDE + code + _FUNCTIONAL_DRIVER.format(func=tests["func_name"])
            return [(program, c["input"], c["output"]) for c in tests["cases"]]
        if kind == "assert":
            return [(PRELUDE + code + "\n" + snippet, "", "") for snippet in tests["snippets"]]
        raise ValueError(f"unknown test kind {kind!r}")

    def _verdict(self, index: int, kind: str, result: ExecResult | str, expected: str) -> dict[str, Any]:
        if isinstance(result, str):
            failed = {"index": index, "status": "sandbox_error", "passed": False, "reason": "sandbox_error"}
            return {**failed, "stderr": result[-400:]}
        verdict: dict[str, Any] = {"index": index, "status": str(result.status), "wall_s": round(result.wall_s, 4)}
        if result.status is not Status.OK:
            verdict["passed"] = False
            verdict["reason"] = {
                Status.ERROR: "runtime_error",
                Status.TIMEOUT: "time_limit",
                Status.MEMORY: "memory_limit",
                Status.OUTPUT_LIMIT: "output_limit",
                Status.VIOLATION: "sandbox_violation",
            }[result.status]
            verdict["stderr"] = result.stderr[-400:]
            return verdict
        if kind == "assert":
            ok = True
        elif kind == "functional":
            ok = _json_equal(result.stdout, expected)
        else:
            ok = outputs_match(result.stdout, expected)
        verdict["passed"] = ok
        if not ok:
            verdict["reason"] = "wrong_answer"
        return verdict

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        code = extract_code(prediction)
        tests = task.tests if isinstance(task.tests, dict) else {}
        if code is None:
            return RewardResult(0.0, {"code_found": False, "passed": 0, "total": 0, "tests": []})
        try:
            jobs = self._jobs(code, tests)
        except (KeyError, TypeError, ValueError) as exc:
            return RewardResult(0.0, {"code_found": True, "error": f"bad tests: {exc}", "tests": []})
        kind = tests["kind"]
        verdicts: list[dict[str, Any] | None] = [None] * len(jobs)
        with ThreadPoolExecutor(max(1, min(self.max_parallel, len(jobs)))) as executor:
            futures = {}
            for index, (program, stdin, expected) in enumerate(jobs):
                cap = max(self.limits.max_output_chars, 2 * len(expected) + 1024)
                limits = self.limits.with_(max_output_chars=cap)
                futures[executor.submit(self._safe_run, program, stdin, limits)] = (index, expected)
            for future, (index, expected) in futures.items():
                if self.fail_fast and any(v is not None and not v["passed"] for v in verdicts):
                    future.cancel()
                    if future.cancelled():
                        verdicts[index] = {"index": index, "passed": False, "reason": "skipped"}
                        continue
                verdicts[index] = self._verdict(index, kind, future.result(), expected)
        passed = sum(1 for v in verdicts if v and v["passed"])
        score = 1.0 if passed == len(jobs) and jobs else 0.0
        return RewardResult(score, {"code_found": True, "passed": passed, "total": len(jobs), "tests": verdicts})


def build(**config: Any) -> CodeTestsReward:
    return CodeTestsReward(**config)
