"""One parametrised test over every registered id, as Gymnasium does for its own envs."""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import coa_envs
from agents.episode import run_episode
from agents.oracle import OracleAgent
from tests.env_fixtures import MAKE_KWARGS

ALL_IDS = coa_envs.ids()
WRONG = "<think>guessing</think>\n<answer>zzqx-987654321</answer>"


def make(env_id: str):
    return gym.make(env_id, **MAKE_KWARGS.get(env_id, {}))


@pytest.fixture(params=ALL_IDS)
def env(request):
    environment = make(request.param)
    yield environment
    environment.close()


def test_registry_is_not_empty_and_ids_are_namespaced():
    assert ALL_IDS and all(i.startswith("coa/") for i in ALL_IDS)


def test_check_env_passes(env):
    check_env(env.unwrapped, skip_render_check=True)


def test_same_seed_gives_same_task_and_observations(env):
    other = make(env.spec.id)
    try:
        first, info_a = env.reset(seed=123)
        second, info_b = other.reset(seed=123)
        assert first == second and info_a["task_id"] == info_b["task_id"]
        action = "<think>x</think><unknown_tool>q</unknown_tool>"
        assert env.step(action)[0] == other.step(action)[0]
    finally:
        other.close()


def test_pickle_round_trip_mid_episode(env):
    env.reset(seed=7)
    env.step("<think>a malformed turn with no action</think>")
    clone = pickle.loads(pickle.dumps(env.unwrapped))
    assert clone.task == env.unwrapped.task and clone.turn == env.unwrapped.turn == 1
    assert clone.step(WRONG)[1:3] == env.unwrapped.step(WRONG)[1:3]
    clone.close()


def test_oracle_episode_reaches_reward_one(env):
    trajectory = run_episode(env, OracleAgent(env), seed=3)
    assert trajectory.status == "ok", trajectory.info
    assert trajectory.reward == 1.0, (trajectory.task_id, trajectory.info)


def test_wrong_answer_gets_reward_zero(env):
    env.reset(seed=5)
    _, reward, terminated, truncated, info = env.step(WRONG)
    assert terminated and not truncated and reward == 0.0
    assert info["answer"] == "zzqx-987654321"
