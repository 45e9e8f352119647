"""The ``coa`` command line: list and eval write what users and scripts read."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from coa_cli.main import app

runner = CliRunner()


def test_list_json_has_every_id_with_family_tools_and_reward():
    import coa_envs

    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["id"] for r in rows] == coa_envs.ids()
    aime = next(r for r in rows if r["id"] == "coa/AIME24-v1")
    assert aime["family"] == "math" and aime["reward"] == "math_verify" and "code" in aime["tools"]


def test_eval_oracle_writes_trajectories_and_summary(tmp_path):
    result = runner.invoke(app, ["eval", "coa/AMC23-v1", "--agent", "oracle", "--n", "40", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_id"] == "coa/AMC23-v1" and summary["episodes"] == 40 and summary["mean_reward"] == 1.0
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 40 and json.loads(lines[0])["reward"] == 1.0


def test_replay_agent_rescored_recorded_run(tmp_path):
    first = tmp_path / "first"
    runner.invoke(app, ["eval", "coa/AIME24-v1", "--agent", "oracle", "--n", "5", "--out", str(first)])
    second = tmp_path / "second"
    replay = f"replay:{first / 'trajectories.jsonl'}"
    result = runner.invoke(app, ["eval", "coa/AIME24-v1", "--agent", replay, "--n", "5", "--out", str(second)])
    assert result.exit_code == 0, result.output
    assert json.loads((second / "summary.json").read_text())["mean_reward"] == 1.0


def test_unknown_agent_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["eval", "coa/AIME24-v1", "--agent", "psychic", "--out", str(tmp_path)])
    assert result.exit_code != 0
