"""Expected user errors print one message -- what was wrong, where, what to do -- and no
traceback; ``--debug`` (anywhere on the line) shows the traceback. And ``coa`` tables never cut
an id, at any terminal width and in a pipe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import coa_envs
from coa_cli.main import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _coa(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The real command line (a console, not CliRunner): what a user sees on stderr."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "coa_cli.main", *args], capture_output=True, text=True,
                          timeout=300, env=environment, cwd=ROOT)


def test_gaia_without_data_is_one_message_saying_where_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("COA_DATA_DIR", raising=False)
    result = runner.invoke(app, ["eval", "coa/GAIA-v1", "--n", "1", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Invalid value for --data" in result.output
    assert "huggingface.co/datasets/gaia-benchmark/GAIA" in result.output


def test_a_yaml_syntax_error_names_the_file_and_line_without_a_traceback(tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text("model:\n  path: tiny\nsft:\n\tlr: 1e-4\n", encoding="utf-8")
    run = _coa("train", "sft", "--config", str(config))
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert f"{config}:4:1: not valid YAML" in " ".join(run.stderr.split())


def test_a_mistyped_model_name_fails_at_once_with_the_catalogue_names(tmp_path):
    run = _coa("eval", "coa/SynthHop-v0", "--model", "smollm2-135", "--n", "1", "--out", str(tmp_path),
               HF_HUB_OFFLINE="1")
    assert run.returncode == 1 and "Traceback" not in run.stderr
    message = " ".join(run.stderr.split())
    assert "model 'smollm2-135' (did you mean 'smollm2-135m'?) is not in the model catalogue" in message
    assert "not a directory" in message and "--debug" in message


def test_debug_shows_the_traceback_wherever_it_is_written(tmp_path):
    for args in (["--debug", "eval"], ["eval", "--debug"]):
        run = _coa(*args, "coa/SynthHop-v0", "--model", "/no/such/model", "--n", "1", "--out", str(tmp_path))
        assert run.returncode == 1 and "Traceback" in run.stderr and "ModelNotFoundError" in run.stderr


def test_find_model_refuses_what_names_nothing_and_passes_what_exists(tmp_path, monkeypatch):
    from agents.models import ModelNotFoundError, find_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert find_model(str(tmp_path)) == str(tmp_path)
    with pytest.raises(ModelNotFoundError, match="no such directory"):
        find_model(str(tmp_path / "missing" / "final"))
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        find_model("some-org/some-model")


def test_only_expected_errors_lose_their_traceback():
    """A user error is shortened; any other exception is a bug and keeps its traceback."""
    import gymnasium as gym

    from coa_cli.main import _user_error
    from coa_envs.errors import OptionError
    from coa_envs.tasks import DataNotFoundError
    from trainers.common.config import ConfigError

    expected = [OptionError("x"), DataNotFoundError("no data"), ConfigError("bad"), gym.error.NameNotFound("x"),
                FileNotFoundError(2, "No such file", "/given/path")]
    bugs = [ValueError("x"), KeyError("x"), TypeError("x"), RuntimeError("x"), FileNotFoundError("no filename")]
    assert all(_user_error(e) for e in expected) and not any(_user_error(e) for e in bugs)


@pytest.mark.parametrize("width", [40, 60, 80, 100, 200])
def test_coa_list_never_cuts_an_id_at_any_width(width):
    result = runner.invoke(app, ["list"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0
    assert "…" not in result.output
    for env_id in coa_envs.ids():
        assert env_id in result.output, (width, env_id)
    assert max(len(line) for line in result.output.splitlines()) <= width


def test_coa_list_in_a_pipe_is_one_whole_line_per_id():
    run = _coa("list")
    assert run.returncode == 0 and "…" not in run.stdout
    for env_id in coa_envs.ids():
        assert any((env_id in line and "test set" in line) or (env_id in line and "80/20" in line)
                   for line in run.stdout.splitlines()), env_id


def test_help_text_is_wrapped_not_cut():
    result = runner.invoke(app, ["eval", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and "…" not in result.output
    assert "http://127.0.0.1:8000/v1" in result.output and "coa/MATH500-v1" in result.output
