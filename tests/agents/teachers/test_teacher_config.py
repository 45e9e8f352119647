"""System files: endpoints resolve per agent at load time; mistakes are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agents.teachers import SystemConfigError, load_system, system_from_dict
from coa_cli.main import app

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_shipped_examples_load_with_every_endpoint_resolved(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    api = load_system(EXAMPLES / "teacher_api.yaml")
    assert api.manager.endpoint.model == "gpt-4o-mini" and api.verifier.endpoint.model == "gpt-4o"
    assert api.verifier.endpoint.base_url == api.manager.endpoint.base_url == "https://api.openai.com/v1"
    assert api.verifier.endpoint.api_key == "sk-test" and api.verifier.max_rejections == 2
    assert [a.name for a in api.agents_for(["web_search", "crawl_page"])] == ["web_agent"]
    assert api.agents_for(["web_search", "crawl_page"])[0].tools == ("web_search", "crawl_page")

    local = load_system(EXAMPLES / "teacher_coa_serve.yaml", base_url="http://127.0.0.1:1234/v1", model="m")
    endpoints = [local.manager.endpoint, local.reflector.endpoint, local.verifier.endpoint,
                 *(a.endpoint for a in local.tool_agents)]
    assert {(e.base_url, e.model, e.max_tokens) for e in endpoints} == {("http://127.0.0.1:1234/v1", "m", 256)}
    monkeypatch.delenv("OPENAI_API_KEY")
    assert local.manager.endpoint.api_key == "EMPTY"  # a local server takes any key


def test_default_members_and_per_agent_overrides():
    system = system_from_dict({"endpoint": {"base_url": "http://h/v1", "model": "base"},
                               "reflector": {"enabled": False},
                               "verifier": {"endpoint": {"model": "strong", "temperature": 0.5}}})
    assert [a.name for a in system.tool_agents] == ["web_agent", "wiki_agent", "code_agent"]
    assert [a.name for a in system.agents_for(["wiki_search", "code"])] == ["wiki_agent", "code_agent"]
    assert not system.reflector.enabled
    assert (system.verifier.endpoint.model, system.verifier.endpoint.temperature) == ("strong", 0.5)
    assert (system.manager.endpoint.model, system.manager.endpoint.temperature) == ("base", 0.0)


@pytest.mark.parametrize(("change", "message"), [
    ({"endpoint": {"model": "m"}}, "base_url and model"),
    ({"endpoint": {"base_url": "ftp://x", "model": "m"}}, "http:// or https://"),
    ({"managr": {}}, "unknown key 'managr' in the config"),
    ({"manager": {"max_step": 3}}, "unknown key 'manager.max_step' in section 'manager'"),
    ({"tool_agents": [{"name": "a", "tools": ["wiki_search"]}, {"name": "b", "tools": ["wiki_search"]}]},
     "given to both a and b"),
    ({"tool_agents": [{"name": "a", "tools": ["browse"]}]}, "unknown tool 'browse'"),
    ({"tool_agents": [{"name": "a-b", "tools": ["code"]}]}, "identifier"),
    ({"tool_agents": [{"name": "a"}]}, "needs a name and a list of tools"),
    ({"manager": {"planning_interval": -1}}, "planning_interval"),
    ({"manager": {"max_steps": "three"}}, "manager.max_steps='three': must be an integer"),
    ({"verifier": {"endpoint": {"temperature": "hot"}}}, "verifier: temperature='hot': must be a number"),
])
def test_mistakes_in_a_system_file_say_what_to_change(change, message):
    data = {"endpoint": {"base_url": "http://h/v1", "model": "m"}, **change}
    with pytest.raises(SystemConfigError, match=message):
        system_from_dict(data)


def test_coa_teach_rejects_a_team_that_cannot_act_in_the_env(tmp_path):
    system = tmp_path / "code_only.yaml"
    system.write_text(yaml.safe_dump({"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
                                      "tool_agents": [{"name": "code_agent", "tools": ["code"]}]}))
    runner = CliRunner()
    result = runner.invoke(app, ["teach", "coa/SynthHop-v0", "--system", str(system), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "no tool agent" in result.output
    math = tmp_path / "math.yaml"
    math.write_text(yaml.safe_dump({"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}))
    result = runner.invoke(app, ["teach", "coa/AIME24-v1", "--system", str(math), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "train" in result.output  # a benchmark test set is never taught on
    broken = tmp_path / "broken.yaml"
    broken.write_text("endpoint: {model: m}\n")
    result = runner.invoke(app, ["teach", "coa/SynthHop-v0", "--system", str(broken)])
    assert result.exit_code != 0 and "base_url" in result.output
