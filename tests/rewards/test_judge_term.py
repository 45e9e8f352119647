"""An LLM judge as one term beside a deterministic one, over a real HTTP endpoint on 127.0.0.1."""

from __future__ import annotations

import pytest

from coa_envs.rewards.llm_judge import VERSION
from tests.rewards.episodes import answer_once
from tests.web_envs.judge_server import judge_server


@pytest.fixture(scope="module")
def judge():
    with judge_server() as server:
        yield server


def _episode(judge, answer: str, model: str = "grader") -> tuple[float, dict]:
    reward, ended, info = answer_once({"terms": [
        {"name": "em_f1", "weight": 0.5},
        {"name": "llm_judge", "weight": 0.5, "base_url": judge.base_url, "model": model, "backoff_s": 0.0,
         "max_retries": 0}]}, answer)
    assert ended
    return reward, info


def test_judge_and_exact_match_each_count_their_weight(judge):
    reward, info = _episode(judge, "{gold}")
    assert reward == 1.0 and info["reward_details"]["terms"]["llm_judge"]["details"]["verdict"] == "yes"
    reward, info = _episode(judge, "I am sure it is {gold}.")  # the judge accepts it, EM does not
    terms = info["reward_details"]["terms"]
    assert reward == 0.5 and terms["em_f1"]["score"] == 0.0 and terms["llm_judge"]["score"] == 1.0
    assert terms["llm_judge"]["version"] == VERSION and terms["llm_judge"]["details"]["prompt_version"] == "generic-v2"


def test_a_judge_that_is_down_costs_only_its_own_term(judge):
    reward, info = _episode(judge, "{gold}", model="down")
    judged = info["reward_details"]["terms"]["llm_judge"]
    assert reward == 0.5 and judged["score"] == 0.0 and judged["details"]["error"] == "judge_http_status"
    assert "judge_http_status" in judged["error"] and "llm_judge" in info["reward_error"]
