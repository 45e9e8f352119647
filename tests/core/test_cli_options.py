"""One KEY=VALUE syntax on the command line: coa eval's -e, also for serve-env and mcp serve."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from coa_cli.main import app
from coa_cli.options import key_values


def test_dotted_keys_and_whole_mappings_read_alike():
    dotted = key_values(["tools.code.backend=subprocess", "max_turns=4", "tools.code.timeout_s=2e-1"])
    whole = key_values(["tools={code: {backend: subprocess, timeout_s: 0.2}}", "max_turns=4"])
    assert dotted == whole == {"tools": {"code": {"backend": "subprocess", "timeout_s": 0.2}}, "max_turns": 4}


@pytest.mark.parametrize("pair", ["max_turns", "=4", " =4"])
def test_a_malformed_pair_is_a_usage_error_naming_the_flag(pair):
    with pytest.raises(typer.BadParameter, match="KEY=VALUE") as caught:
        key_values([pair], "--tool-config")
    assert caught.value.param_hint == "--tool-config"


def test_serve_env_takes_env_options_and_the_old_set_with_a_moved_message(monkeypatch):
    pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
    served = {}
    import coa_envs.service.running as running

    monkeypatch.setattr(running, "run_server", lambda app, **kwargs: served.update(app=app, **kwargs))
    runner = CliRunner()
    ok = runner.invoke(app, ["serve-env", "coa/AIME24-v1", "-e", "max_turns=2", "--port", "0"])
    assert ok.exit_code == 0 and served["port"] == 0 and "moved" not in ok.output, ok.output
    old = runner.invoke(app, ["serve-env", "coa/AIME24-v1", "--set", "max_turns=0", "--port", "0"])
    assert old.exit_code == 2 and "--set moved to --env-option" in old.output and "max_turns" in old.output
    dotted = runner.invoke(app, ["serve-env", "coa/AIME24-v1", "-e", "tools.code.backend=nope", "--port", "0"])
    assert dotted.exit_code == 2 and "backend" in dotted.output, dotted.output
