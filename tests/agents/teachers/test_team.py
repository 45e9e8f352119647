"""A teacher team plays real envs through their own tools, driven by scripted models over HTTP."""

from __future__ import annotations

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from agents.rollout import play_episode, run_rollouts
from agents.teachers import system_from_dict, teacher_factory
from agents.teachers.bridge import strip_observation
from tests.agents.teachers.conftest import system_dict
from tests.agents.teachers.scripted import message_text, script_from_task


@pytest.fixture(scope="module")
def synthhop():
    env = gym.make("coa/SynthHop-v0")
    yield env
    env.close()


def _two_hop(env, skip: int = 0):
    tasks = [t for t in env.unwrapped.tasks if t.metadata["hops"] == 2]
    return tasks[skip]


def _play(env, system, task, seed=11):
    index = env.unwrapped.tasks.index(task)
    agent = teacher_factory(system)(env, seed)
    return play_episode(env, agent, seed=seed, options={"task_index": index})


def test_the_team_acts_through_the_env_and_every_agent_uses_its_own_endpoint(synthhop, scripted_server):
    task = _two_hop(synthhop)
    team, url = scripted_server([script_from_task(task)])
    roles, role_url = scripted_server([script_from_task(task)])
    system = system_from_dict(system_dict(url, role_url=role_url))
    trajectory = _play(synthhop, system, task)

    assert (trajectory.status, trajectory.reward, trajectory.answer) == ("ok", 1.0, task.gold[0])
    actions = [s.text for s in trajectory.segments if s.kind == "generated"]
    queries = [a for a in task.metadata["oracle_actions"] if "<wiki_search>" in a]
    assert actions[:-1] == [q[q.index("<wiki_search>"):] for q in queries]  # the bare calls reached the env
    assert actions[-1] == f"<answer>{task.gold[0]}</answer>"

    # A member read exactly what the env returned: its next request carries the observation.
    observations = [s.text for s in trajectory.segments if s.kind == "observation"]
    member_texts = ["\n".join(map(message_text, r["messages"])) for r in team.requests if r["model"] == "wiki_agent"]
    for observation in observations:
        assert any(strip_observation(observation) in text for text in member_texts)

    assert {r["model"] for r in team.requests} == {"manager", "wiki_agent"}
    assert {r["model"] for r in roles.requests} == {"reflector", "verifier"}
    assert all(r["seed"] == 11 and r["temperature"] == 0.0 and r["max_tokens"] == 300
               for r in team.requests + roles.requests)
    assert any(r.get("tools") for r in team.requests if r["model"] == "manager")  # delegation is a tool call

    events = trajectory.info["teacher"]["events"]
    kinds = [(e["agent"], e["kind"]) for e in events]
    assert kinds[:5] == [("manager", "plan"), ("manager", "think"), ("manager", "think"), ("wiki_agent", "think"),
                         ("wiki_agent", "tool")]
    assert kinds[-4:] == [("manager", "think"), ("manager", "suggested_answer"), ("verifier", "double_check"),
                          ("manager", "answer")]
    assert [e["turn"] for e in events if e["kind"] in ("tool", "answer")] == [0, 1, 2]
    assert sum(kind == ("reflector", "reflection") for kind in kinds) == 2  # one per delegated step
    usage = trajectory.info["teacher"]["agents"]
    assert usage["reflector"]["calls"] == 2 and usage["verifier"]["calls"] == 1 and usage["wiki_agent"]["calls"] == 4
    assert trajectory.info["teacher"]["verdicts"] == ["accept"]

    # The manager read each report together with the reviewer's reflection.
    manager_last = "\n".join(map(message_text, [r for r in team.requests if r["model"] == "manager"][-1]["messages"]))
    assert "Report from wiki_agent" in manager_last and "Reflection from the reviewer" in manager_last


def test_a_rejected_answer_sends_the_manager_back_until_the_cap(synthhop, scripted_server):
    task = _two_hop(synthhop, skip=1)
    _, url = scripted_server([script_from_task(task, "corrected")])
    corrected = _play(synthhop, system_from_dict(system_dict(url)), task)
    assert (corrected.reward, corrected.info["teacher"]["verdicts"]) == (1.0, ["reject", "accept"])
    assert corrected.info["teacher"]["rejections"] == 1
    suggested = [e["text"] for e in corrected.info["teacher"]["events"] if e["kind"] == "suggested_answer"]
    assert suggested == ["Nobody Knows", task.gold[0]]

    # With no rejections allowed the verifier's doubt is recorded, and the wrong answer stands.
    capped = _play(synthhop, system_from_dict(system_dict(url, verifier={"max_rejections": 0})), task)
    assert (capped.reward, capped.answer, capped.info["teacher"]["verdicts"]) == (0.0, "Nobody Knows", ["reject"])


def test_the_last_turn_is_kept_for_the_answer(synthhop, scripted_server):
    task = _two_hop(synthhop)
    _, url = scripted_server([script_from_task(task)])
    env = gym.make("coa/SynthHop-v0", max_turns=2)
    try:
        trajectory = _play(env, system_from_dict(system_dict(url)), task)
    finally:
        env.close()
    assert trajectory.status == "ok" and trajectory.terminated  # answered, not truncated
    assert trajectory.num_turns == 2 and trajectory.tool_calls == {"wiki_search": 1}


def test_a_thought_that_led_to_no_call_is_dropped(synthhop, scripted_server):
    task = _two_hop(synthhop)
    _, url = scripted_server([script_from_task(task, "stumble")])
    trajectory = _play(synthhop, system_from_dict(system_dict(url)), task)
    assert trajectory.reward == 1.0
    assert trajectory.info["teacher"]["dropped_thoughts"] == 2  # one per delegated step
    texts = [e["text"] for e in trajectory.info["teacher"]["events"]]
    assert not any("which query" in text for text in texts)


def test_an_unreachable_endpoint_ends_each_episode_with_an_error_not_a_hang(synthhop, scripted_server):
    _, url = scripted_server([])
    dead = "http://127.0.0.1:9/v1"  # discard port: connection refused
    system = system_from_dict(system_dict(url, manager={"endpoint": {"model": "manager", "base_url": dead}}))
    result = run_rollouts(lambda: gym.make("coa/SynthHop-v0"), teacher_factory(system), task_indices=[0, 1],
                          concurrency=2, episode_timeout_s=120)
    assert [t.status for t in result.trajectories] == ["error:agent", "error:agent"]
    assert all("teacher team failed" in t.info["error"] for t in result.trajectories)
    assert all(t.info["teacher"]["agents"]["manager"]["errors"] >= 1 for t in result.trajectories)


def test_a_manager_out_of_steps_answers_from_memory_and_the_verifier_still_checks(synthhop, scripted_server):
    task = _two_hop(synthhop)
    _, url = scripted_server([script_from_task(task)])
    system = system_from_dict(system_dict(url, manager={"max_steps": 1, "planning_interval": 1}))
    trajectory = _play(synthhop, system, task)
    teacher = trajectory.info["teacher"]
    assert teacher["fallback_answer"] and trajectory.tool_calls == {"wiki_search": 1}
    assert trajectory.answer == task.gold[0]  # the scripted last-resort answer
    kinds = [(e["agent"], e["kind"]) for e in teacher["events"]]
    assert kinds.count(("manager", "plan")) == 1  # the last-resort answer is not a plan
    assert kinds[-3:] == [("manager", "suggested_answer"), ("verifier", "double_check"), ("manager", "answer")]
    assert teacher["verdicts"] == ["accept"] and teacher["rejections"] == 0
