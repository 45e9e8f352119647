"""Each distillation stage catches what it exists for, and lets the rest through."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from agents.episode import run_episode
from agents.oracle import OracleAgent
from agents.trajectory import Trajectory, read_trajectories, write_trajectory
from trainers.distill import distill, quality_score
from trainers.distill.filters import diversity_reason, format_reason, leak_reason, limits_reason


@pytest.fixture(scope="module")
def synthhop():
    env = gym.make("coa/SynthHop-v0")
    yield env
    env.close()


def _oracle(env, task) -> Trajectory:
    return run_episode(env, OracleAgent(env), seed=3, options={"task_id": task.task_id})


def _two_hop(env):
    return next(t for t in env.unwrapped.tasks if t.metadata["hops"] == 2)


def _with_first_action(trajectory: Trajectory, text: str) -> Trajectory:
    changed = Trajectory.from_dict(trajectory.to_dict())
    changed.segments[0].text = text
    return changed


def test_leakage_question_metadata_and_knowing_the_answer_before_evidence(synthhop):
    task = _two_hop(synthhop)
    gold, tools = task.gold, ["wiki_search"]
    clean = _oracle(synthhop, task)
    assert clean.reward == 1.0 and leak_reason(clean, gold, tools) is None

    first = clean.segments[0].text
    knew = _with_first_action(clean, f"<think>It must be {gold[0]}.</think>\n{first[first.index('<wiki_search>'):]}")
    assert leak_reason(knew, gold, tools) == "leak:before_evidence"
    # Searching for the answer itself is knowing it too.
    assert leak_reason(_with_first_action(clean, f"<wiki_search>{gold[0]}</wiki_search>"), gold, tools) \
        == "leak:before_evidence"

    asked = Trajectory.from_dict(clean.to_dict())
    asked.prompt_messages[-1]["content"] += f" (Hint: {gold[0].upper()}.)"  # normalised match
    assert leak_reason(asked, gold, tools) == "leak:question"
    told = Trajectory.from_dict(clean.to_dict())
    told.info["make_kwargs"] = {"task_options": {"note": gold[0]}}
    assert leak_reason(told, gold, tools) == "leak:metadata"
    # Derived answers (no retrieval tool) are never "leaked" by appearing early.
    assert leak_reason(knew, gold, ["code"]) is None


def test_format_limits_and_diversity(synthhop):
    task = _two_hop(synthhop)
    clean = _oracle(synthhop, task)
    assert format_reason(clean) is None and limits_reason(clean, 3, 0) is None
    assert limits_reason(clean, 2, 0) == "too_many_turns"
    assert limits_reason(clean, 0, len(clean.response_text) - 1) == "too_long"
    assert diversity_reason(clean, 1, 1) is None  # the oracle thinks before each call
    assert diversity_reason(clean, 2, 1) == "few_tools" and diversity_reason(clean, 1, 2) == "few_roles"
    unfinished = Trajectory.from_dict(clean.to_dict())
    unfinished.segments[-1].text = unfinished.segments[-1].text.replace("<answer>", "<think>").replace(
        "</answer>", "</think>")
    assert format_reason(unfinished) == "bad_action"  # a turn with no action
    early = Trajectory.from_dict(clean.to_dict())
    early.segments[0].text = "<answer>x</answer>"
    assert format_reason(early) == "bad_turn_order"


def _with_roles(task_id: str, roles: str, turns: int = 2) -> Trajectory:
    trajectory = Trajectory(env_id="coa/SynthHop-v0", task_id=task_id, prompt_text="Q?", reward=1.0,
                            terminated=True, answer="Ada")
    for index in range(turns - 1):
        trajectory.add_generated(f"{roles if index == 0 else ''}<wiki_search>q{index}</wiki_search>")
        trajectory.add_observation("\n<observation>\nr\n</observation>\n\n")
    trajectory.add_generated("<answer>Ada</answer>")
    return trajectory


def test_quality_ranking_prefers_reflection_and_error_correction_under_a_budget(tmp_path):
    plain = _with_roles("t1", "<think>a</think>", turns=2)
    reflective = _with_roles("t1", "<think>a</think><reflection>b</reflection>", turns=3)
    corrected = _with_roles("t1", "<suggested_answer>Bob</suggested_answer><double_check>no</double_check>", turns=4)
    other = _with_roles("t2", "<think>a</think>", turns=2)
    assert quality_score(corrected) > quality_score(reflective) > quality_score(plain)
    run = tmp_path / "runs.jsonl"
    with open(run, "w", encoding="utf-8") as handle:
        for trajectory in (plain, reflective, corrected, other):
            write_trajectory(handle, trajectory)
    offline = {"leak_check": False, "replay": False}
    report = distill([run], tmp_path / "q.jsonl", **offline)
    assert [t.num_turns for t in read_trajectories(tmp_path / "q.jsonl")] == [4, 2]  # t1's corrected, t2
    assert report.stages[-1] == {"stage": "select", "in": 4, "out": 2, "dropped": {"over_task_cap": 2}}
    distill([run], tmp_path / "s.jsonl", prefer="shortest", **offline)
    assert [t.num_turns for t in read_trajectories(tmp_path / "s.jsonl")] == [2, 2]
    capped = distill([run], tmp_path / "b.jsonl", max_per_task=0, budget=2, **offline)
    assert [t.num_turns for t in read_trajectories(tmp_path / "b.jsonl")] == [4, 3]  # the two best overall
    assert capped.stages[-1]["dropped"] == {"over_budget": 2}


def test_replay_catches_an_edited_record_and_an_env_that_cannot_be_built(synthhop, tmp_path):
    tasks = [t for t in synthhop.unwrapped.tasks if t.metadata["hops"] == 2][:4]
    good, edited, rescored, elsewhere = (_oracle(synthhop, task) for task in tasks)
    edited.segments[1].text = edited.segments[1].text.replace("Doc 1", "Doc 7")
    rescored.reward = 0.5
    elsewhere.info["make_kwargs"] = {"task_options": {"num_tasks": 0}}  # an env that cannot be built
    run = tmp_path / "runs.jsonl"
    with open(run, "w", encoding="utf-8") as handle:
        for trajectory in (good, edited, rescored, elsewhere):
            write_trajectory(handle, trajectory)
    report = distill([run], tmp_path / "out.jsonl", min_reward=0.5, leak_check=False)
    assert report.stages[-2] == {"stage": "replay", "in": 4, "out": 1, "dropped": {
        "replay:env_unavailable": 1, "replay:observation_mismatch": 1, "replay:reward_mismatch": 1}}
    assert [t.task_id for t in read_trajectories(tmp_path / "out.jsonl")] == [good.task_id]
    assert any("coa/SynthHop-v0" in error for error in report.errors)
    saved = json.loads((tmp_path / "out.jsonl.report.json").read_text())
    assert saved["errors"] == report.errors
