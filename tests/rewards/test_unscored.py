"""A reward that gives no verdict (its judge is down) is not a 0: the episode is unscored.

The env names the failure in ``info["reward_error"]``; the episode ends ``error:reward``; eval
leaves it out of accuracy and counts it; the RL loop drops it with every other error episode
(``trainers/rl/loop.py``: ``trajectory.status.is_error``). A failing *shaping* term still only
costs its own share: the answer was judged.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401  (registers the ids)
from agents.episode import run_episode
from agents.metrics import summarize
from agents.report import Run, comparison_rows
from agents.trajectory import EpisodeStatus
from tests.web_envs.judge_server import judge_server


@pytest.fixture(scope="module")
def judge():
    with judge_server() as server:
        yield server


def _judge(judge, model: str) -> dict:
    return {"name": "llm_judge", "base_url": judge.base_url, "model": model, "max_retries": 0, "backoff_s": 0.0}


def _play(reward: dict, answer_gold: bool = True):
    env = gym.make("coa/WebWalkerQA-v1", reward=reward)
    try:
        def agent(observation, info):
            gold = env.unwrapped.task.gold[0]
            return f"<answer>{gold if answer_gold else 'no idea'}</answer>"

        return run_episode(env, agent, options={"task_id": env.unwrapped.tasks[0].task_id})
    finally:
        env.close()


def test_a_judge_that_is_down_leaves_the_episode_unscored(judge):
    trajectory = _play(_judge(judge, "down"))
    assert trajectory.status is EpisodeStatus.ERROR_REWARD and trajectory.status.is_error
    assert "judge_http_status" in trajectory.info["reward_error"]
    assert trajectory.info["reward_details"]["error"] == "judge_http_status"  # what the judge said is kept


def test_eval_leaves_unscored_episodes_out_of_accuracy_and_counts_them(judge):
    scored = _play(_judge(judge, "grader"))
    unscored = _play(_judge(judge, "down"))
    unscored.task_id = "another-task"
    summary = summarize("coa/WebWalkerQA-v1", [scored, unscored])
    assert scored.status is EpisodeStatus.OK and scored.reward == 1.0
    assert summary["accuracy"] == 1.0 and summary["tasks"] == 1  # not 0.5: the outage is not a wrong answer
    assert summary["unscored"] == 1 and summary["errors"] == 1
    rows = dict(comparison_rows([Run("run", None, summary)]))  # type: ignore[arg-type]
    assert rows["unscored (no verdict)"] == ["1"]


def test_a_failing_shaping_term_costs_only_its_share(judge):
    trajectory = _play({"terms": [{"name": "em_f1"}, {**_judge(judge, "down"), "weight": 0.5}]})
    assert trajectory.status is EpisodeStatus.OK and trajectory.reward == 1.0
    assert "llm_judge" in trajectory.info["reward_error"]


def test_a_judge_with_no_gold_to_compare_gives_no_verdict_either(judge):
    from coa_envs.rewards import RewardUnavailable
    from coa_envs.rewards.llm_judge import build
    from coa_envs.types import Task

    with pytest.raises(RewardUnavailable, match="no gold"):
        build(base_url=judge.base_url, model="grader")("x", Task("t", "q"))
