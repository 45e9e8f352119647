"""visual_inspector keeps a multimodal endpoint's answer to its max_chars, as it keeps a document's text."""

from __future__ import annotations

import json
from pathlib import Path

from coa_envs.tools.visual_inspector import build
from coa_envs.types import Task, ToolContext


def _answer(text: str):
    reply = {"id": "c", "object": "chat.completion", "model": "m",
             "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}
    return lambda _request: (200, "application/json", json.dumps(reply).encode())


def test_model_answer_is_cut_to_max_chars(api_server, tmp_path: Path) -> None:
    image = tmp_path / "chart.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(32))
    ctx = ToolContext(task=Task(task_id="t", question="q", files=(str(image),)))
    tool = build("openai", base_url=api_server.base_url + "/v1", model="vision", api_key="k", max_chars=500)
    api_server.behaviour = _answer("red bar " * 100_000)  # 800 kB, within max_response_bytes
    long = tool.run("chart.png", ctx)
    assert long.ok and len(long.text) <= len("File: chart.png\n") + 500
    assert long.text.endswith("…") and long.details["truncated"] is True
    api_server.behaviour = _answer("a short answer")
    short = tool.run("chart.png", ctx)
    assert short.text == "File: chart.png\na short answer" and short.details["truncated"] is False
