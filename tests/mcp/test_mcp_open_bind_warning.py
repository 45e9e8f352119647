"""``coa mcp serve --transport http`` on an interface other than loopback without a token warns
that anyone who can reach it can call its tools (``coa serve-env`` warns the same; the MCP
server said nothing while serving the code sandbox to the network)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

pytest.importorskip("mcp", reason="needs the [mcp] extra")


@pytest.mark.parametrize(("host", "token", "warned"), [("0.0.0.0", None, True), ("127.0.0.1", None, False),
                                                       ("0.0.0.0", "s3cret", False)])
def test_an_open_bind_without_a_token_warns(monkeypatch, host, token, warned):
    import coa_envs.service.running as running
    from coa_cli.main import app as cli

    served = []
    monkeypatch.setattr(running, "run_server", lambda app, **kwargs: served.append(kwargs["host"]))
    monkeypatch.delenv("COA_MCP_TOKEN", raising=False)
    args = ["mcp", "serve", "--tools", "code", "--transport", "http", "--host", host, "--port", "0"]
    result = CliRunner().invoke(cli, args + (["--token", token] if token else []))
    assert result.exit_code == 0, result.output
    assert served == [host]
    assert ("without --token" in result.output) is warned
