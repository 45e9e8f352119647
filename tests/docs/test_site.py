"""The docs site builds with no warnings, and its generated reference pages match the code."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.docs.mdpages import ROOT


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "NO_MKDOCS_2_WARNING": "1"}


def test_generated_reference_pages_are_up_to_date():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"], cwd=ROOT,
                            env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_pages_cover_every_command_id_and_config_key():
    from coa_envs.registry import ids

    cli = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    for command in ("## coa eval", "## coa retriever build-index", "## coa train sft", "## coa train rl"):
        assert command + "\n" in cli
    assert "`--corpus` (required)" in cli and "`--data`" in cli
    envs = (ROOT / "docs" / "reference" / "envs.md").read_text(encoding="utf-8")
    assert all(f"| `{env_id}` |" in envs for env_id in ids())
    config = (ROOT / "docs" / "reference" / "config.md").read_text(encoding="utf-8")
    for key in ("optim.learning_rate", "algorithm.clip_eps_high", "model.warm_start.episodes", "bookkeeping.resume"):
        assert f"`{key}`" in config


def test_site_builds_strict_without_warnings(tmp_path):
    pytest.importorskip("mkdocs", reason="needs the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="needs mkdocs-material (the docs extra)")
    pytest.importorskip("mkdocstrings_handlers.python", reason="needs mkdocstrings[python] (the docs extra)")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "WARNING" not in output, output[-4000:]
    api = (tmp_path / "site" / "reference" / "api.html").read_text(encoding="utf-8")
    assert "CoAEnv" in api and "OracleAgent" in api  # mkdocstrings rendered the docstrings
