"""The code a reader copies from README.md and docs/ runs, and prints what the page says.

Blocks marked ``<!-- run -->`` run by default, those marked ``<!-- run: slow -->`` (SFT, RL)
with ``-m slow``; each page's blocks run in order in one fresh directory (with ``examples/``
linked in), as a reader following the page would. Every Python block, runnable or not, must
at least import only names that exist, so a renamed export cannot leave an example behind.
"""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.mdpages import ROOT, Block, blocks, pages

RUNNERS = {"python": [sys.executable], "py": [sys.executable], "bash": ["bash", "-eo", "pipefail"],
           "sh": ["bash", "-eo", "pipefail"], "console": ["bash", "-eo", "pipefail"]}


def _runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.runnable]


PAGES_WITH_BLOCKS = [p for p in pages() if _runnable(p)]
PAGES_WITH_SLOW = [p for p in PAGES_WITH_BLOCKS if any(b.slow for b in _runnable(p))]


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _run_page(page_blocks: list[Block], workdir: Path, cache: Path, timeout: int) -> None:
    if shutil.which("coa") is None and any(b.language != "python" for b in page_blocks):
        pytest.skip("the `coa` command is not installed (pip install -e .)")
    (workdir / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "COA_CACHE_DIR": str(cache), "NO_COLOR": "1", "COLUMNS": "120", "TQDM_DISABLE": "1"}
    for number, block in enumerate(page_blocks):
        runner = RUNNERS.get(block.language)
        assert runner, f"{block.where()}: a runnable block must be python or bash, not {block.language!r}"
        script = workdir / f"block{number}.{'py' if runner[0] == sys.executable else 'sh'}"
        script.write_text(block.code, encoding="utf-8")
        result = subprocess.run([*runner, script.name], cwd=workdir, env=env, capture_output=True, text=True,
                                timeout=timeout)
        output = result.stdout + result.stderr
        assert result.returncode == 0, f"{block.where()} failed (exit {result.returncode}):\n{output[-3000:]}"
        for expected in block.expect:
            assert expected in output, f"{block.where()}: output lacks {expected!r}:\n{output[-3000:]}"


@pytest.mark.parametrize("page", PAGES_WITH_BLOCKS, ids=_id)
def test_runnable_blocks_run_and_print_what_the_page_says(page, tmp_path, tmp_path_factory):
    cheap = [b for b in _runnable(page) if not b.slow]
    if not cheap:
        pytest.skip("every runnable block of this page is slow (-m slow)")
    _run_page(cheap, tmp_path, tmp_path_factory.mktemp("cache"), timeout=300)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the newcomer path trains SFT and RL: ~20 min on a busy 2-core machine
@pytest.mark.parametrize("page", PAGES_WITH_SLOW, ids=_id)
def test_slow_pages_run_end_to_end(page, tmp_path, tmp_path_factory):
    _run_page(_runnable(page), tmp_path, tmp_path_factory.mktemp("cache"), timeout=1800)


def test_the_readme_quick_start_is_runnable_and_checked():
    quick = [b for b in blocks(ROOT / "README.md") if b.runnable and b.language == "python"]
    assert quick, "README.md has no <!-- run --> python block: its quick start would drift unchecked"
    assert any(b.expect for b in quick), "the README quick start must state its output with expect=..."


def _imports(block: Block) -> list[tuple[str, str | None]]:
    try:
        tree = ast.parse(block.code)
    except SyntaxError:
        return []  # fragments (`...`, shell prompts) are not importable programs
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.module, alias.name) for alias in node.names]
    return found


OURS = ("coa_envs", "agents", "trainers", "sandbox", "coa_cli", "coa_verifiers")
IMPORTS = sorted({(module, name, b.where()) for p in pages() for b in blocks(p) if b.language in ("python", "py")
                  for module, name in _imports(b) if module.split(".")[0] in OURS})


@pytest.mark.parametrize(("module", "name", "where"), IMPORTS, ids=[f"{m}:{n or ''}" for m, n, _ in IMPORTS])
def test_names_the_docs_import_exist(module, name, where):
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        if exc.name and exc.name.split(".")[0] not in OURS:
            pytest.skip(f"{where}: needs an optional dependency: {exc}")
        raise AssertionError(f"{where}: `import {module}` fails: {exc}") from exc
    if name is not None and not hasattr(imported, name):
        try:
            importlib.import_module(f"{module}.{name}")
        except ImportError:
            raise AssertionError(f"{where}: `from {module} import {name}`: {module} has no {name}") from None


def test_agents_exports_the_names_the_docs_use():
    import agents

    for name in ("OracleAgent", "LLMPolicy", "Trajectory", "EpisodeRecorder"):
        assert getattr(agents, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        agents.Nope  # noqa: B018
