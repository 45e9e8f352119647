"""``coa gateway`` as a user runs it: a real process serving the tiny model, answering the
``openai`` client on a session URL and writing the finished session to ``--out``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import httpx
import pytest


def _coa() -> list[str]:
    return [shutil.which("coa")] if shutil.which("coa") else [sys.executable, "-m", "coa_cli.main"]


def test_coa_gateway_serves_records_and_writes_sessions(tmp_path):
    import openai

    out = tmp_path / "sessions.jsonl"
    process = subprocess.Popen([*_coa(), "gateway", "--tiny", str(tmp_path / "tiny"), "--port", "0", "--out", str(out)],
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        url, deadline, seen = None, time.monotonic() + 300, []
        while url is None and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line and process.poll() is not None:
                break
            seen.append(line)
            found = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
            url = found.group(1) if found else None
        assert url, "".join(seen)[-2000:]
        client = openai.OpenAI(base_url=f"{url}/sessions/cli-1/v1", api_key="x", max_retries=0)
        name = client.models.list().data[0].id
        reply = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert reply.usage.completion_tokens == 4
        assert httpx.post(f"{url}/sessions/cli-1/finish", json={"answer": "a"}).json()["status"] == "ok"
        (row,) = [json.loads(line) for line in out.read_text().splitlines()]
        assert row["info"]["gateway"]["session_id"] == "cli-1" and row["answer"] == "a"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.mark.parametrize(("args", "message"), [
    (["m", "--upstream", "http://127.0.0.1:1/v1"], "not both"),
    ([], "give a MODEL"),
    (["m", "--chat-template", "no-such-template"], "neither a file nor"),
])
def test_coa_gateway_refuses_a_bad_command_line_clearly(args, message):
    result = subprocess.run([*_coa(), "gateway", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert message in re.sub(r"\s+", " ", result.stderr.replace("│", " "))
