"""The layering in DESIGN.md, enforced: sandbox <- coa_envs <- agents <- trainers <- coa_cli.

A package may import its own layer and the layers below it, never one above, not even lazily
(an import inside a function, under ``TYPE_CHECKING``, or ``importlib.import_module("...")``
with a literal name): an upward import is a cycle waiting to happen and drags a policy or a
trainer into code that must stay an env. Every module's source is parsed, not imported, so
the test sees the imports that only run on some code paths. benchmarks/, tests/, examples/
and scripts/ sit outside the layering and may import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("sandbox", "coa_envs", "agents", "trainers", "coa_cli")
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def _package_of(path: Path, root: Path) -> tuple[str, ...]:
    """Dotted package parts of a module file (``agents/engines/hf.py`` -> agents.engines)."""
    parts = path.relative_to(root).with_suffix("").parts
    return parts if path.name == "__init__.py" else parts[:-1]


def _imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, wherever it sits."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package_of(path, root)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = package[: len(package) - node.level + 1]
                found.append((node.lineno, ".".join((*base, node.module or ""))))
            elif node.module:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def layering_violations(root: Path = ROOT) -> list[str]:
    violations = []
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            for line, module in _imported_modules(path, root):
                top = module.split(".")[0]
                if top in RANK and RANK[top] > RANK[layer]:
                    violations.append(f"{path.relative_to(root)}:{line} ({layer}) imports {module} ({top})")
    return violations


def test_no_layer_imports_a_higher_one():
    violations = layering_violations()
    assert not violations, "upward imports (see DESIGN.md, Dependency direction):\n" + "\n".join(violations)


@pytest.mark.parametrize(
    ("source", "upward"),
    [
        ("import agents.policy\n", True),
        ("def f():\n    from trainers.rl import loop\n", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from coa_cli.main import app\n", True),
        ("import importlib\nimportlib.import_module('agents.tiny')\n", True),
        ("from ..tools import build_tool\n", False),
        ("import sandbox\nfrom coa_envs.types import Task\n", False),
    ],
)
def test_the_checker_sees_every_kind_of_import(tmp_path, source, upward):
    """The checker itself can fail: lazy, type-only and importlib imports are all seen."""
    module = tmp_path / "coa_envs" / "tools" / "probe.py"
    module.parent.mkdir(parents=True)
    module.write_text(source)
    assert bool(layering_violations(tmp_path)) is upward
