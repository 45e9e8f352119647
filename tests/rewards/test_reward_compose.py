"""Composition: the arithmetic, what each term reports, failing terms, config validation."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401  (registers ids)
from coa_envs.rewards import EpisodeView, build_reward, em_f1
from coa_envs.rewards.compose import describe_reward, primary_score, term_errors
from coa_envs.types import RewardResult, Task
from tests.rewards.episodes import answer_once

TASK = Task("t1", "Which river flows through Paris?", gold=("Seine", "River Seine"))
GOOD_TURNS = (
    ("generated", "<think>Search first.</think><wiki_search>river Paris</wiki_search>"),
    ("observation", "\n<observation>\nThe Seine flows through Paris.\n</observation>\n\n"),
    ("generated", "<reflection>The passage names it.</reflection><answer>the Seine</answer>"),
)
PLUGIN = "tests.rewards.plugin_terms"


def view(answer: str = "the Seine", segments=GOOD_TURNS) -> EpisodeView:
    return EpisodeView(task=TASK, answer=answer, segments=tuple(segments))


def test_one_term_form_gives_exactly_the_terms_score_and_its_details_at_the_top():
    reward = build_reward({"name": "em_f1", "metric": "f1"})
    result = reward.score_episode(view("Seine in France"))
    direct = __import__("coa_envs.rewards.em_f1", fromlist=["build"]).build(metric="f1")("Seine in France", TASK)
    assert result.score == direct.score == pytest.approx(0.5)  # exactly equal, not just close
    assert {k: result.details[k] for k in direct.details} == dict(direct.details)
    entry = result.details["terms"]["em_f1"]
    assert entry == {"name": "em_f1", "version": em_f1.VERSION, "scope": "episode", "weight": 1.0,
                     "score": direct.score, "weighted": direct.score}
    assert result.details["primary"] == "em_f1" and primary_score(result.details) == direct.score


def test_total_is_the_weighted_sum_of_terms_with_negative_weights_and_no_clipping():
    reward = build_reward({"terms": [
        {"name": "em_f1", "weight": 2.0},
        {"name": "format", "weight": 0.5},
        {"name": PLUGIN, "label": "turns", "weight": -0.25},
    ]})
    result = reward.score_episode(view())
    terms = result.details["terms"]
    assert (terms["em_f1"]["score"], terms["format"]["score"], terms["turns"]["score"]) == (1.0, 1.0, 2.0)
    assert [terms[k]["weighted"] for k in ("em_f1", "format", "turns")] == [2.0, 0.5, -0.5]
    assert result.score == pytest.approx(2.0 + 0.5 - 0.5)
    wrong = reward.score_episode(view("the Loire"))
    assert wrong.score == pytest.approx(0.0 + 0.5 - 0.5) and wrong.details["terms"]["em_f1"]["score"] == 0.0


def test_each_term_reports_name_version_weight_score_and_details_and_the_primary_chooses_the_top():
    reward = build_reward({"terms": [{"name": "format", "weight": 0.1}, {"name": "subem"}], "primary": "subem"})
    result = reward.score_episode(view("it is the Seine"))
    assert result.details["primary"] == "subem" and result.details["matched_gold"] == "Seine"
    fmt = result.details["terms"]["format"]
    assert (fmt["name"], fmt["version"], fmt["weight"], fmt["scope"]) == ("format", 1, 0.1, "episode")
    assert fmt["details"]["order"] is True and fmt["details"]["problems"] == []
    assert "details" not in result.details["terms"]["subem"]  # the primary's details are the top level


def test_the_same_term_twice_under_two_labels():
    reward = build_reward({"terms": [{"name": "em_f1"}, {"name": "em_f1", "label": "f1", "metric": "f1",
                                                          "weight": 0.5}]})
    result = reward.score_episode(view("Seine in France"))
    assert result.details["terms"]["em_f1"]["score"] == 0.0
    assert result.details["terms"]["f1"]["score"] == pytest.approx(0.5)
    assert result.score == pytest.approx(0.25)


def test_a_failing_term_scores_zero_is_reported_and_the_others_still_count():
    reward = build_reward({"terms": [{"name": "em_f1"}, {"name": PLUGIN, "label": "broken", "fail": True},
                                     {"name": "format", "weight": 0.25}]})
    result = reward.score_episode(view())
    broken = result.details["terms"]["broken"]
    assert broken["score"] == 0.0 and broken["weighted"] == 0.0 and broken["version"] == 3
    assert broken["error"] == "RuntimeError: the scorer's backend is down"
    assert result.score == pytest.approx(1.25)
    assert term_errors(result.details) == "broken: RuntimeError: the scorer's backend is down"


@pytest.mark.parametrize("bad", [float("nan"), math.inf, "1.0", None, True])
def test_a_term_returning_a_non_number_fails_like_one_that_raises(bad):
    reward = build_reward({"terms": [{"name": "em_f1"}, {"name": "format"}]})
    reward.terms[1].impl = type("Bad", (), {"score": lambda self, episode: RewardResult(bad)})()
    result = reward.score_episode(view())
    assert result.score == 1.0 and "finite number" in result.details["terms"]["format"]["error"]


def test_a_failing_primary_leaves_no_top_level_details_and_no_crash():
    reward = build_reward({"terms": [{"name": PLUGIN, "label": "broken", "fail": True}, {"name": "em_f1"}]})
    result = reward.score_episode(view())
    assert result.score == 1.0 and primary_score(result.details) == 0.0 and "em" not in result.details


def test_in_the_env_a_failing_term_ends_the_episode_normally_with_reward_error():
    reward, ended, info = answer_once({"terms": [
        {"name": "em_f1"}, {"name": PLUGIN, "label": "broken", "fail": True, "weight": 5.0}]})
    assert ended and reward == 1.0
    assert info["error_kind"] == "reward_error" and info["reward_error"].startswith("broken: RuntimeError")
    assert info["reward_details"]["terms"]["em_f1"]["score"] == 1.0


def test_the_env_gives_episode_terms_the_whole_trajectory_and_its_tool_calls():
    env = gym.make("coa/SynthHop-v0", reward={"terms": [
        {"name": "em_f1"}, {"name": "format", "weight": 0.1}, {"name": "tool_use", "weight": 0.2},
        {"name": PLUGIN, "label": "turns", "weight": 0.01}]})
    try:
        env.reset(seed=1)
        task = env.unwrapped.task
        env.step(f"<think>look it up</think><wiki_search>{task.question}</wiki_search>")
        env.step(f"<think>again</think><wiki_search>  {task.question} </wiki_search>")  # the env's repeat test
        _, reward, terminated, _, info = env.step(f"<reflection>found</reflection><answer>{task.gold[0]}</answer>")
    finally:
        env.close()
    terms = info["reward_details"]["terms"]
    assert terminated and terms["turns"]["details"] == {"turns": 3}
    assert terms["tool_use"]["details"] == {"called": True, "no_repeats": False, "tool_calls": 2,
                                            "calls_run": 1, "repeated_queries": 1}
    assert terms["format"]["score"] == 1.0 and terms["format"]["details"]["spans"] == 8
    assert reward == pytest.approx(1.0 + 0.1 + 0.2 * 0.5 + 0.03)


def test_group_terms_read_pending_until_scored():
    reward = build_reward({"terms": [{"name": "em_f1"}, {"name": "group_length", "weight": 0.5}]})
    result = reward.score_episode(view())
    assert result.score == 1.0
    assert result.details["terms"]["group_length"] == {"name": "group_length", "version": 1, "scope": "group",
                                                       "weight": 0.5, "score": None, "weighted": None,
                                                       "pending": True}


@pytest.mark.parametrize(("config", "message"), [
    ({"name": "vibes"}, "reward.name='vibes' is not valid; allowed:"),
    ({"terms": []}, "reward.terms=[] is not valid"),
    ({"terms": [{"name": "em_f1", "weight": "high"}]}, "reward.terms[0].weight='high' is not valid"),
    ({"terms": [{"name": "em_f1", "weight": math.nan}]}, "weight=nan is not valid"),
    ({"terms": [{"name": "em_f1"}, {"name": "em_f1"}]}, "two terms are labelled 'em_f1'"),
    ({"terms": [{"name": "em_f1"}], "metric": "f1"}, "keys ['metric'] are not valid beside terms"),
    ({"terms": [{"name": "em_f1"}], "primary": "format"}, "reward.primary='format' is not valid"),
    ({"terms": [{"name": "group_length"}, {"name": "em_f1"}]}, "is a group term"),
    ({"terms": [{"name": "em_f1", "metric": "accuracy"}]}, "metric must be 'em' or 'f1'"),
    ({"terms": [{"name": "format", "colour": "red"}]}, "reward term 'format' (format):"),
    ({"terms": [{"name": "overlong", "max_length": 100, "buffer": 100}]}, "buffer=100 must be below"),
    ({"terms": [{"name": "no_such_pkg.term"}]}, "cannot import no_such_pkg.term"),
])
def test_bad_reward_blocks_fail_at_make_time_naming_the_key(config, message):
    with pytest.raises(ValueError, match=None) as error:
        gym.make("coa/SynthHop-v0", reward=config)
    assert message in str(error.value)


def test_an_override_tunes_the_same_term_and_replaces_with_another():
    assert gym.make("coa/SynthHop-v0", reward={"metric": "f1"}).unwrapped.config.reward == {
        "name": "em_f1", "metric": "f1"}
    assert gym.make("coa/BrowseComp-v1", data_path="tests/web_envs/fixtures/browse_comp_test_set.csv",
                    reward={"name": "gaia"}).unwrapped.config.reward == {"name": "gaia"}  # no judge prompt
    terms = {"terms": [{"name": "em_f1"}, {"name": "format", "weight": 0.1}]}
    assert gym.make("coa/SynthHop-v0", reward=terms).unwrapped.config.reward == terms


def test_listing_shows_the_composition():
    assert describe_reward({"name": "em_f1"}) == "em_f1"
    assert describe_reward({"terms": [{"name": "em_f1"}, {"name": "format", "weight": 0.1},
                                      {"name": "overlong", "weight": -0.5, "label": "len"}]}) == (
        "em_f1 + 0.1*format - 0.5*len")


def test_called_as_a_plain_reward_episode_terms_see_only_the_answer():
    reward = build_reward({"terms": [{"name": "em_f1"}, {"name": "tool_use", "weight": 0.5}]})
    result = reward("Seine", TASK)
    assert result.score == pytest.approx(1.0 + 0.5 * 0.5)  # no tool calls; no repeats either
