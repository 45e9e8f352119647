"""The real-web envs on their official formats: make, attachments, oracle evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import coa_envs  # noqa: F401
from coa_cli.main import app

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch, tmp_path):
    monkeypatch.setenv("COA_NO_HF_DOWNLOAD", "1")
    monkeypatch.setenv("COA_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("COA_DATA_DIR", "COA_JUDGE_BASE_URL", "COA_JUDGE_MODEL", "SERPER_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("data", ["gaia", "gaia_simple.json"])
def test_coa_eval_gaia_oracle_scores_one_on_both_layouts(tmp_path, data):
    result = CliRunner().invoke(app, ["eval", "coa/GAIA-v1", "--data", str(FIXTURES / data), "--split", "all",
                                      "--agent", "oracle", "--n", "10", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mean_reward"] == 1.0 and summary["episodes"] == {"gaia": 3}.get(data, 2)


def test_gaia_env_exposes_attachments_to_the_file_tool():
    env = gym.make("coa/GAIA-v1", data_path=str(FIXTURES / "gaia"), task_options={"level": 2})
    try:
        prompt, info = env.reset(seed=0)
        assert "Attached files: c0a1f1x7-0002.csv" in prompt
        assert set(info["tools"]) == {"web_search", "crawl_page", "visual_inspector"}
        observation, _, _, _, step_info = env.step(
            "<visual_inspector>c0a1f1x7-0002.csv | total of the amount column</visual_inspector>")
        assert "shelves" in observation and step_info["error_kind"] is None
        _, reward, terminated, _, step_info = env.step("<answer>1,250</answer>")
        assert terminated and reward == 1.0 and step_info["reward_details"]["scorer"] == "gaia"
    finally:
        env.close()


def test_web_search_without_a_key_is_an_observation_not_a_crash():
    env = gym.make("coa/BrowseComp-v1", data_path=str(FIXTURES / "browse_comp_test_set.csv"))
    try:
        env.reset(seed=0)
        observation, _, terminated, _, info = env.step("<web_search>kite festival town</web_search>")
        assert not terminated and info["error_kind"] == "not_configured"
        assert "SERPER_API_KEY" in observation
    finally:
        env.close()


@pytest.mark.parametrize(
    ("env_id", "data", "expected_scorer"),
    [
        ("coa/BrowseComp-v1", "browse_comp_test_set.csv", "fallback_em"),
        ("coa/HLE-v1", "hle", "fallback_em"),
        ("coa/WebWalkerQA-v1", None, "fallback_em"),
    ],
)
def test_judged_envs_report_the_fallback_without_a_judge(env_id, data, expected_scorer):
    kwargs = {"data_path": str(FIXTURES / data)} if data else {}
    env = gym.make(env_id, **kwargs)
    try:
        env.reset(seed=0)
        gold = env.unwrapped.task.gold[0]
        _, reward, _, _, info = env.step(f"<answer>{gold}</answer>")
        assert reward == 1.0 and info["reward_details"]["scorer"] == expected_scorer
    finally:
        env.close()


def test_hle_image_question_carries_its_image_file():
    env = gym.make("coa/HLE-v1", data_path=str(FIXTURES / "hle"))
    try:
        prompt, _ = env.reset(options={"task_id": "coa-hle-fixture-0003"})
        assert "Attached files:" in prompt and ".png" in prompt
        assert Path(env.unwrapped.task.files[0]).read_bytes().startswith(b"\x89PNG")
    finally:
        env.close()
