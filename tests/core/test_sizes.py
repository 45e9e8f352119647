"""The house size limits (STYLE.md), enforced: no file over 400 lines, no function over 120.

A module past 400 lines has stopped doing one job, and a function past 120 lines hides the
steps a reader needs named. Every Python file of the packages, the tests, the benchmarks, the
examples and the scripts is parsed, not imported. The few files allowed past a limit are
listed below with why and with the size they may not grow past; an exception that no longer
exceeds the limit must be removed, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCOPE = ("sandbox", "coa_envs", "agents", "trainers", "coa_cli", "benchmarks", "tests",
         "examples", "scripts")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 120

#: path -> (lines it may not exceed, why it is allowed past MAX_FILE_LINES for now)
FILE_EXCEPTIONS: dict[str, tuple[int, str]] = {}

#: "path:function" -> (lines it may not exceed, why it is allowed past MAX_FUNCTION_LINES)
FUNCTION_EXCEPTIONS: dict[str, tuple[int, str]] = {}


def python_files(root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for top in SCOPE:
        files.extend(p for p in sorted((root / top).rglob("*.py"))
                     if not any(part.startswith(".") or part == "__pycache__" for part in p.parts))
    return files


def file_sizes(root: Path = ROOT) -> dict[str, int]:
    return {str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines())
            for p in python_files(root)}


def _functions(node: ast.AST, prefix: str = "") -> dict[str, int]:
    """Qualified name -> lines from ``def`` to the last line, for every function in ``node``."""
    sizes: dict[str, int] = {}
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                sizes[name] = child.end_lineno - child.lineno + 1
            sizes.update(_functions(child, f"{name}."))
        else:
            sizes.update(_functions(child, prefix))
    return sizes


def function_sizes(root: Path = ROOT) -> dict[str, int]:
    """``path:qualified.name`` -> lines of every function in scope."""
    sizes: dict[str, int] = {}
    for path in python_files(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = path.relative_to(root)
        sizes.update({f"{rel}:{name}": size for name, size in _functions(tree).items()})
    return sizes


def oversized(sizes: dict[str, int], limit: int,
              exceptions: dict[str, tuple[int, str]]) -> tuple[list[str], list[str]]:
    """(what is too big, exceptions that are stale: gone or back within the limit)."""
    too_big = []
    for name, size in sorted(sizes.items()):
        allowed = exceptions.get(name, (limit, ""))[0]
        if size > allowed:
            too_big.append(f"{name}: {size} lines (limit {allowed})")
    stale = [f"{name}: {sizes.get(name, 0)} lines" for name in sorted(exceptions)
             if sizes.get(name, 0) <= limit]
    return too_big, stale


def test_no_file_is_over_400_lines():
    too_big, stale = oversized(file_sizes(), MAX_FILE_LINES, FILE_EXCEPTIONS)
    assert not too_big, "split these modules (one job each):\n" + "\n".join(too_big)
    assert not stale, "remove these from FILE_EXCEPTIONS (now within the limit):\n" + "\n".join(stale)


def test_no_function_is_over_120_lines():
    too_big, stale = oversized(function_sizes(), MAX_FUNCTION_LINES, FUNCTION_EXCEPTIONS)
    assert not too_big, "split these functions into named steps:\n" + "\n".join(too_big)
    assert not stale, ("remove these from FUNCTION_EXCEPTIONS (now within the limit):\n"
                       + "\n".join(stale))


@pytest.mark.parametrize("lines, limit, caught", [(400, 400, False), (401, 400, True)])
def test_the_checker_counts_files_and_nested_functions(tmp_path, lines, limit, caught):
    (tmp_path / "tests").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(lines - 3))
    source = f"class Box:\n    def method(self):\n{body}\n        return 0\n"
    source = source.replace("\n    x", "\n        x")
    (tmp_path / "tests" / "big.py").write_text(source, encoding="utf-8")
    files = file_sizes(tmp_path)
    functions = function_sizes(tmp_path)
    assert files == {"tests/big.py": lines}
    assert functions == {"tests/big.py:Box.method": lines - 1}
    assert bool(oversized(files, limit, {})[0]) is caught
    assert bool(oversized(functions, limit - 1, {})[0]) is caught
    assert oversized(files, limit, {"tests/big.py": (lines, "why")}) == ([], [] if caught else
                                                                         ["tests/big.py: 400 lines"])
