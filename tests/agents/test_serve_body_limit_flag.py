"""``--max-body-mb`` sets the request body limit of ``coa serve`` and ``coa gateway`` (it was
fixed at 64 MiB: a long multimodal or many-turn history had no way past the 413, and an
operator had no way to lower it)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("fastapi", reason="needs the [serve] extra")


def _served_app(monkeypatch, command: list[str]):
    """The ASGI app ``coa COMMAND`` would serve (the server call is replaced by a catch)."""
    import uvicorn

    import coa_envs.service.running as running
    from coa_cli.main import app as cli

    caught = {}

    def catch(app, *args, **kwargs):
        caught["app"] = app

    monkeypatch.setattr(uvicorn, "run", catch)
    monkeypatch.setattr(running, "run_server", catch)
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 0, result.output
    return caught["app"]


@pytest.mark.parametrize("command", ["serve", "gateway"])
def test_max_body_mb_sets_the_413_limit(monkeypatch, tiny_dir, tmp_path, command):
    from starlette.testclient import TestClient

    extra = ["--out", str(tmp_path / "t.jsonl")] if command == "gateway" else []
    app = _served_app(monkeypatch, [command, str(tiny_dir), "--max-body-mb", "0.01", *extra])  # 10485 bytes
    body = {"model": "x", "messages": [{"role": "user", "content": "a" * 12_000}], "max_tokens": 1}
    with TestClient(app) as client:
        refused = client.post("/v1/chat/completions", content=json.dumps(body),
                              headers={"content-type": "application/json"})
        assert refused.status_code == 413, refused.text
        assert "10485" in refused.json()["error"]["message"]
        body["messages"][0]["content"] = "a" * 9_000
        assert client.post("/v1/chat/completions", json=body).status_code != 413


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_a_body_limit_that_holds_nothing_is_a_usage_error(value):
    from coa_cli.main import app as cli

    result = CliRunner().invoke(cli, ["serve", "--tiny", "unused", "--max-body-mb", value])
    assert result.exit_code == 2 and "--max-body-mb" in result.output
