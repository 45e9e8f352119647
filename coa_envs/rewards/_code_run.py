"""What one code test sends into the sandbox, and how its result is judged back on the host.

The rule (DESIGN "Where the next parts go (2026-11-26)"): the model's program never decides
its own verdict. A run receives only the test's *input* (stdin, or a call's arguments); the
expected output stays in this process. What comes back is data: the program's stdout (stdin
tests) or one result record holding the JSON of the function's return value (functional
tests), and the host compares it with the expectation.

Why this holds against a hostile program, which can do anything inside its own process:

* **Early exit** (``sys.exit``, ``os._exit``, ``atexit``, signals, threads, killing itself):
  a functional run that ends before the driver wrote its record has no record, and a test
  without exactly one record, or whose run did not end with status ``ok``, fails.
* **Objects that lie** (``__eq__`` always true, an ``int`` subclass, a patched ``json``): the
  value crosses the process boundary as JSON text and is parsed here with the standard
  parser into plain lists, dicts, strings and numbers; nothing of the program's survives.
* **A forged record** (writing to the result descriptor itself, then exiting): it carries a
  value of the program's choosing, which is all a correct function returns anyway. The
  expected value is not in the sandbox to be copied, so forging is only a guess; each test
  runs in its own process, so a record cannot be reused for another test.
* **Noise and size**: the solution's own prints go to stderr (``stdout`` is the result
  channel only); anything else on the channel, a malformed or oversized record (the output
  limit), JSON nested deeper than the parser takes, fails the test.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["PRELUDE", "RECORD_MARK", "functional_program", "outputs_match", "read_record", "values_equal"]

# Names LeetCode-style solutions use without importing (``List[int]``, ``deque``...), as the
# official LiveCodeBench runner provides them.
PRELUDE = (
    "from typing import *\nfrom collections import *\nfrom functools import *\n"
    "from itertools import *\nfrom heapq import *\nfrom bisect import *\n"
    "import math, string, re, sys, heapq, bisect, collections, itertools, functools, random\n"
)
RECORD_MARK = "\x1ecoa-result\x1f"
"""Starts the one line a functional run writes on its result channel (control characters,
so that no ordinary print can produce it by accident)."""

# Before the solution: keep a private copy of stdout as the result channel and send the
# solution's own prints (fd 1, sys.stdout) to stderr; read the arguments first, so a solution
# that reads stdin itself finds nothing.
_HEAD = """import json as _coa_json, os as _coa_os, sys as _coa_sys
_coa_channel = _coa_os.dup(1)
_coa_os.dup2(2, 1)
_coa_args = [_coa_json.loads(_l) for _l in _coa_sys.stdin.read().split("\\n") if _l.strip()]
_coa_dumps, _coa_write = _coa_json.dumps, _coa_os.write
"""
# After the solution: one call, its value as JSON on the channel. Reached only if the
# solution's module code and the call both completed.
_TAIL = """
_coa_target = Solution().{func} if "Solution" in globals() else globals()["{func}"]
_coa_value = _coa_dumps(_coa_target(*_coa_args))
_coa_write(_coa_channel, ({mark!r} + _coa_value + "\\n").encode("utf-8"))
"""


def functional_program(code: str, func_name: str) -> str:
    """The program a functional test runs: the solution between the driver's head and tail."""
    if not func_name.isidentifier():
        raise ValueError(f"func_name {func_name!r} is not a Python identifier")
    return PRELUDE + _HEAD + code + "\n" + _TAIL.format(func=func_name, mark=RECORD_MARK)


def read_record(stdout: str) -> tuple[Any, str | None]:
    """``(value, None)`` from a functional run's channel, or ``(None, why it is unusable)``."""
    lines = [line for line in stdout.split("\n") if line]
    records = [line for line in lines if line.startswith(RECORD_MARK)]
    if not records:
        return None, "no_result"  # the call never returned: an early exit, or nothing to call
    if len(records) > 1 or len(lines) > 1:
        return None, "bad_result"  # something besides the driver wrote on the channel
    try:
        return json.loads(records[0][len(RECORD_MARK):]), None
    except (ValueError, RecursionError, MemoryError):
        return None, "bad_result"


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def values_equal(actual: Any, expected_json: str) -> bool:
    """The official LiveCodeBench rule for call-based tests: equal after JSON (tuples as lists)."""
    try:
        return bool(_plain(actual) == _plain(json.loads(expected_json)))
    except (ValueError, RecursionError, MemoryError):
        return False


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
    """Equal after per-line whitespace normalisation; numeric tokens compared as decimals
    (as the official LiveCodeBench checker does)."""
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
            if da is None or db is None or not (da.is_finite() and db.is_finite()) or da != db:
                return False
    return True
