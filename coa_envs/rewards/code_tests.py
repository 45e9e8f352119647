""" "All tests pass" reward for the code family; every test runs in the sandbox, every verdict here.

The answer is the content of ``<answer>``: the last fenced Python block in it (or the whole
text when there is no fence). Each test case is its own sandbox run (in parallel, through the
sandbox's default backend, whose warm pool absorbs them) that receives only the case's input;
what comes back is data, compared in this process (:mod:`coa_envs.rewards._code_run` says
why a hostile program cannot decide its own verdict):

* ``stdin`` cases: the program's stdout against the expected output, line by line with
  whitespace normalised and numbers compared as decimals (the official LiveCodeBench checker);
* ``functional`` cases: the JSON of ``Solution().<func>(*args)``'s return value against the
  expected JSON (the official rule). Assert-style tasks are rewritten into such calls when
  loaded (:mod:`coa_envs.tasks.code_asserts`).

A case passes only when its run ended ``ok`` and its output matched; score 1 only if every
case passes. ``details`` holds each case's verdict, how many cases are public (the problem
statement's examples) or private, and ``public_tests_only`` when no private case was run:
such a score says the program reproduces the examples, which a lookup table does too.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coa_envs.rewards._code_run import PRELUDE, functional_program, outputs_match, read_record, values_equal
from coa_envs.tasks.code_asserts import AssertRewriteError, rewrite_asserts
from coa_envs.types import RewardResult, Task
from sandbox import ExecResult, Limits, Status

__all__ = ["PRELUDE", "VERSION", "CodeTestsReward", "build", "extract_code", "outputs_match"]

VERSION = 5  # bump when the scores this term gives change (reported in reward_details)
# 2: results compared on the host; assert-style tests rewritten into calls (an early exit,
#    a lying __eq__ or reading the program's own source no longer passes)
# 3: the sandbox's verdicts (wave 3, round two): a test run that ends past its wall limit fails
#    as a timeout (4 in 5 such runs passed), and one whose child the seccomp filter killed
#    fails as a violation though the parent carried on and printed the expected output
# 4: a program that signals itself dies of it on the pool and nsjail too (wave 3, round three):
#    printing the answer and then os.kill(os.getpid(), SIGKILL), signal.alarm or abort() ran on
#    as PID 1 and passed; it now ends as it does outside the sandbox, and fails

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(answer: str) -> str | None:
    """The last fenced block (preferring python-tagged ones), else the bare text."""
    blocks = _FENCE_RE.findall(answer or "")
    python = [code for lang, code in blocks if lang.lower() in ("python", "py", "python3", "")]
    chosen = python or [code for _, code in blocks]
    if chosen:
        return chosen[-1].strip("\n") or None
    text = (answer or "").strip()
    return text or None


def _cases(tests: Any) -> tuple[str, str | None, list[dict[str, Any]]]:
    """``(kind, func_name, cases)`` of a task's tests; assert snippets (a task built by hand in
    the old form) are rewritten here as the loader would. Raises ValueError for bad tests."""
    if not isinstance(tests, dict):
        raise ValueError("the task has no tests")
    kind = tests.get("kind")
    if kind == "assert":
        try:
            name, cases = rewrite_asserts(list(tests["snippets"]), tests.get("func_name"))
        except AssertRewriteError as exc:
            raise ValueError(f"assert-style tests cannot be compared outside the program: {exc}") from None
        return "functional", name, [{**c, "public": True} for c in cases]
    if kind not in ("stdin", "functional"):
        raise ValueError(f"unknown test kind {kind!r}")
    cases = tests["cases"]
    if not cases or not all(isinstance(c, dict) and "input" in c and "output" in c for c in cases):
        raise ValueError("tests need a non-empty list of {input, output} cases")
    name = tests.get("func_name") if kind == "functional" else None
    if kind == "functional" and not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(f"functional tests need a func_name, got {name!r}")
    return kind, name, cases


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

    def _verdict(self, index: int, kind: str, result: ExecResult | str, expected: str) -> dict[str, Any]:
        if isinstance(result, str):
            failed = {"index": index, "status": "sandbox_error", "passed": False, "reason": "sandbox_error"}
            return {**failed, "stderr": result[-400:]}
        verdict: dict[str, Any] = {"index": index, "status": str(result.status), "wall_s": round(result.wall_s, 4)}
        if result.status is not Status.OK or result.truncated:  # a cut output is not the program's output
            verdict["passed"] = False
            verdict["reason"] = _FAILED_STATUS.get(result.status, "output_limit")
            verdict["stderr"] = result.stderr[-400:]
            return verdict
        if kind == "functional":
            value, problem = read_record(result.stdout)
            ok = problem is None and values_equal(value, expected)
            reason = problem or "wrong_answer"
        else:
            ok, reason = outputs_match(result.stdout, expected), "wrong_answer"
        verdict["passed"] = ok
        if not ok:
            verdict["reason"] = reason
            if reason != "wrong_answer":
                verdict["stderr"] = result.stderr[-400:]
        return verdict

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        kind, func_name, cases = _cases(task.tests)  # bad test data raises: a reward error, not a 0
        public = sum(1 for c in cases if c.get("public"))
        counts = {"total": len(cases), "public_tests": public, "private_tests": len(cases) - public,
                  "public_tests_only": public == len(cases)}
        code = extract_code(prediction)
        if code is None:
            return RewardResult(0.0, {"code_found": False, "passed": 0, **counts, "tests": []})
        program = code if func_name is None else functional_program(code, func_name)
        verdicts: list[dict[str, Any] | None] = [None] * len(cases)
        with ThreadPoolExecutor(max(1, min(self.max_parallel, len(cases)))) as executor:
            futures = {}
            for index, case in enumerate(cases):
                expected = str(case["output"])
                cap = max(self.limits.max_output_chars, 2 * len(expected) + 1024)
                limits = self.limits.with_(max_output_chars=cap)
                futures[executor.submit(self._safe_run, program, str(case["input"]), limits)] = (index, expected)
            for future, (index, expected) in futures.items():
                if self.fail_fast and any(v is not None and not v["passed"] for v in verdicts):
                    future.cancel()
                    if future.cancelled():
                        verdicts[index] = {"index": index, "passed": False, "reason": "skipped"}
                        continue
                verdicts[index] = self._verdict(index, kind, future.result(), expected)
        passed = sum(1 for v in verdicts if v and v["passed"])
        score = 1.0 if passed == len(cases) else 0.0
        return RewardResult(score, {"code_found": True, "passed": passed, **counts, "tests": verdicts})


_FAILED_STATUS = {
    Status.ERROR: "runtime_error",
    Status.TIMEOUT: "time_limit",
    Status.MEMORY: "memory_limit",
    Status.OUTPUT_LIMIT: "output_limit",
    Status.VIOLATION: "sandbox_violation",
}


def build(**config: Any) -> CodeTestsReward:
    return CodeTestsReward(**config)
