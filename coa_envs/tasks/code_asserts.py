"""Assert-style code tests rewritten into calls whose results the host compares.

The seed's verl files test LeetCode problems with Python snippets such as::

    result = Solution().maxEnergyBoost([4, 1, 1], [1, 1, 3])
    assert result == 7, f"Expected 7, but got {repr(result)}"

Run as they are, the assert executes inside the model's own program, which can end the
process before it (``sys.exit(0)``, ``os._exit``, an ``atexit`` hook), return an object whose
``__eq__`` is always true, or read the expected value out of its own source. So a snippet is
never run: each ``assert`` is parsed here, on the host, into a call (function name and
literal arguments, sent to the sandbox) and an expected value (kept on the host). The result
is a ``functional`` case like the official LiveCodeBench ones: ``input`` one JSON value per
line (the arguments), ``output`` the JSON of the expected return value.

Only the shapes such files use are accepted: ``result = CALL`` followed by
``assert result == EXPECTED``, or ``assert CALL == EXPECTED`` (either side), where CALL is
``Solution().<name>(...)`` or ``<name>(...)`` with literal arguments and EXPECTED a literal.
Anything else is refused with an error that says why, rather than run in the model's process.
"""

from __future__ import annotations

import ast
import json
from typing import Any

__all__ = ["AssertRewriteError", "rewrite_asserts"]


class AssertRewriteError(ValueError):
    """An assert-style test is not of a shape that can be compared outside the program."""


def _literal(node: ast.expr, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise AssertRewriteError(f"{what} `{ast.unparse(node)[:80]}` is not a literal") from None


def _as_json(value: Any, what: str) -> str:
    """JSON text of a literal; tuples become lists, as the official LiveCodeBench grader sees them."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        raise AssertRewriteError(f"{what} {value!r:.80} has no JSON form (sets, bytes, complex)") from None


def _call_name(call: ast.expr) -> str | None:
    """``Solution().name(...)`` or ``name(...)`` -> ``name``; anything else -> None."""
    if not isinstance(call, ast.Call):
        return None
    target = call.func
    if isinstance(target, ast.Name):
        return target.id
    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Call)
            and isinstance(target.value.func, ast.Name) and target.value.func.id == "Solution"
            and not target.value.args and not target.value.keywords):
        return target.attr
    return None


def _case(call: ast.Call, expected: ast.expr, func_name: str | None) -> tuple[str, dict[str, str]]:
    name = _call_name(call)
    if name is None:
        raise AssertRewriteError(f"`{ast.unparse(call)[:80]}` is not a call of Solution().<name> or <name>")
    if func_name and name != func_name:
        raise AssertRewriteError(f"the test calls {name}, but the task's function is {func_name}")
    if call.keywords:
        raise AssertRewriteError(f"`{ast.unparse(call)[:80]}` passes keyword arguments")
    arguments = [_as_json(_literal(arg, "argument"), "argument") for arg in call.args]
    output = _as_json(_literal(expected, "expected value"), "expected value")
    return name, {"input": "\n".join(arguments), "output": output}


def _compare_sides(test: ast.expr) -> tuple[ast.expr, ast.expr]:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        raise AssertRewriteError(f"`assert {ast.unparse(test)[:80]}` is not `assert <call> == <expected>`")
    return test.left, test.comparators[0]


def rewrite_asserts(snippets: list[str], func_name: str | None = None) -> tuple[str, list[dict[str, str]]]:
    """``(function name, cases)`` for assert-style ``snippets``; raises :class:`AssertRewriteError`."""
    cases: list[dict[str, str]] = []
    names: set[str] = set()
    for snippet in snippets:
        try:
            module = ast.parse(snippet)
        except SyntaxError as exc:
            raise AssertRewriteError(f"a test snippet is not valid Python ({exc.msg})") from None
        calls: dict[str, ast.Call] = {}  # variable -> the call assigned to it
        for statement in module.body:
            if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name) and isinstance(statement.value, ast.Call)):
                calls[statement.targets[0].id] = statement.value
                continue
            if not isinstance(statement, ast.Assert):
                raise AssertRewriteError(f"`{ast.unparse(statement)[:80]}` is neither `x = <call>` nor an assert")
            left, right = _compare_sides(statement.test)
            if isinstance(left, ast.Name) and left.id in calls:
                left = calls[left.id]
            elif isinstance(right, ast.Name) and right.id in calls:
                left, right = calls[right.id], left
            elif isinstance(right, ast.Call) and not isinstance(left, ast.Call):
                left, right = right, left
            if not isinstance(left, ast.Call):
                raise AssertRewriteError(f"`assert {ast.unparse(statement.test)[:80]}` compares no call")
            name, case = _case(left, right, func_name)
            names.add(name)
            cases.append(case)
    if not cases:
        raise AssertRewriteError("the tests hold no assert")
    if len(names) > 1:
        raise AssertRewriteError(f"the tests call several functions {sorted(names)}")
    return func_name or names.pop(), cases
