"""``RemoteEnv`` / ``coa/Remote-v0``: a served env is the same env as the in-process one (check_env,
episodes, rewards, info), and third-party clients (OpenEnv's ``EnvClient``), ``coa eval
--env-url`` and the RL rollout workers (``env_url``) all step it."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("websockets", reason="coa serve-env needs the [serve] extra")

import gymnasium as gym
from gymnasium.utils.env_checker import check_env
from typer.testing import CliRunner

import coa_envs  # noqa: F401
from agents.oracle import oracle_answer_text
from coa_envs.registry import REMOTE_ID
from coa_envs.service import RemoteEnv, RemoteEnvError
from tests.service.servers import serve

ENV = "coa/AIME24-v1"
TIMING = {"tool_latency_s", "cpu_s"}  # the only info fields allowed to differ between two runs


def _without_timing(info):
    if isinstance(info, dict):
        return {k: _without_timing(v) for k, v in info.items() if k not in TIMING}
    if isinstance(info, (list, tuple)):
        return [_without_timing(v) for v in info]
    return info


def test_check_env_passes_on_the_remote_client():
    with serve([ENV]) as url:
        env = gym.make(REMOTE_ID, base_url=url, env_id=ENV)
        try:
            check_env(env.unwrapped, skip_render_check=True)
            assert env.unwrapped.config.env_id == ENV and env.unwrapped.config.tools == ("code",)
        finally:
            env.close()


def test_a_remote_episode_equals_the_in_process_one():
    local = gym.make(ENV, max_turns=4)
    actions = ["<think>try</think><code>print(sum(range(10)))</code>",
               "<code>print(1)",  # malformed: a corrective observation
               "<think>again</think><code>print(sum(range(10)))</code>",  # a repeated query
               "<answer>45</answer>"]
    with serve([ENV]) as url:
        remote = gym.make(REMOTE_ID, base_url=url, env_id=ENV, overrides={"max_turns": 4})
        try:
            for seed in (0, 11):
                first_local, info_local = local.reset(seed=seed)
                first_remote, info_remote = remote.reset(seed=seed)
                assert first_remote == first_local and info_remote == _without_timing(info_local)
                for action in actions:
                    want, got = local.step(action), remote.step(action)
                    assert got[:4] == want[:4]
                    assert _without_timing(got[4]) == _without_timing(want[4])
            assert remote.unwrapped.task.task_id == local.unwrapped.task.task_id
            assert [t.task_id for t in remote.unwrapped.tasks] == [t.task_id for t in local.unwrapped.tasks]
            assert remote.unwrapped.task.gold == ()  # answers stay on the server unless exposed
        finally:
            remote.close()
            local.close()


def test_remote_env_refusals_raise_with_the_servers_reason():
    with serve([ENV, "coa/AMC23-v1"]) as url:
        with pytest.raises(RemoteEnvError, match="name one as env_id"):
            RemoteEnv(url)
        with pytest.raises(RemoteEnvError, match="UNKNOWN_ENV"):
            RemoteEnv(url, "coa/Nope-v0")
        with pytest.raises(RemoteEnvError, match=r"BAD_OVERRIDE.*data_path"):
            RemoteEnv(url, ENV, overrides={"data_path": "/etc"})
        env = RemoteEnv(url, "coa/AMC23-v1")
        with pytest.raises(RemoteEnvError, match="NO_EPISODE"):
            env.step("<answer>1</answer>")
        env.reset(seed=0)
        env.step("<answer>1</answer>")
        with pytest.raises(RemoteEnvError, match="EPISODE_DONE"):
            env.step("<answer>1</answer>")
        env.close()
    with pytest.raises(RemoteEnvError, match=r"CONNECTION_LOST.*cannot reach"):
        RemoteEnv(url)  # the server is gone


def test_pickled_remote_env_opens_its_own_session():
    with serve([ENV]) as url:
        env = RemoteEnv(url)
        env.reset(seed=3)
        clone = pickle.loads(pickle.dumps(env))
        with pytest.raises(RemoteEnvError, match="NO_EPISODE"):
            clone.step("<answer>1</answer>")  # a new session: the episode did not travel
        assert clone.reset(seed=3)[0] == env.reset(seed=3)[0]
        assert clone.config.session_id != env.config.session_id
        clone.close()
        env.close()


def test_openenv_client_steps_a_served_env():
    openenv = pytest.importorskip("openenv.core", reason="openenv-core is not installed")
    local = gym.make(ENV)
    with serve([ENV]) as url:
        with openenv.GenericEnvClient(base_url=url).sync() as client:
            result = client.reset(seed=5)
            assert result.done is False and result.reward is None
            task_id = result.observation["info"]["task_id"]
            local.reset(seed=5)
            assert result.observation["text"] == local.unwrapped.messages(local.unwrapped.task)[0]["content"] + \
                "\n\n" + local.unwrapped.task.question
            result = client.step({"action": "<code>print(2 ** 10)</code>"})
            assert "1024" in result.observation["text"] and result.done is False
            result = client.step({"action": oracle_answer_text(local.unwrapped.task, "math")})
            assert result.done is True and result.reward == 1.0
            state = client.state()
            assert state["step_count"] == 2 and state["task_id"] == task_id and state["episode_id"]
            with pytest.raises(RuntimeError, match="EPISODE_DONE"):
                client.step({"action": "<answer>1</answer>"})

        async def async_client() -> float:  # the async EnvClient, on the env's own URL
            async with openenv.GenericEnvClient(base_url=f"{url}/envs/{ENV}") as client:
                await client.reset(seed=5, task_id=task_id)
                return (await client.step({"action": "<answer>-1</answer>"})).reward

        assert asyncio.run(async_client()) == 0.0
    local.close()


def test_coa_eval_plays_a_served_env(tmp_path):
    from coa_cli.main import app as cli

    with serve([ENV], expose_answers=True) as url:
        result = CliRunner().invoke(cli, ["eval", ENV, "--env-url", url, "--agent", "oracle", "--n", "4",
                                          "--concurrency", "2", "--out", str(tmp_path), "--no-plots",
                                          "--no-progress"])
        assert result.exit_code == 0, result.output
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["accuracy"] == 1.0 and summary["env_url"] == url and summary["distinct_tasks"] == 4
        lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
        assert len(lines) == 4 and all(json.loads(line)["env_id"] == ENV for line in lines)
        refused = CliRunner().invoke(cli, ["eval", ENV, "--env-url", url, "--data", "/etc/passwd", "--n", "1",
                                           "--out", str(tmp_path / "x"), "--no-progress"])
        assert refused.exit_code == 2 and "data_path" in refused.output


def test_a_served_env_speaks_the_tools_protocol_too():
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "code", "arguments": '{"code": "print(2 ** 5)"}'}}]}
    with serve([ENV]) as url:
        remote = gym.make(REMOTE_ID, base_url=url, env_id=ENV, overrides={"protocol": "tools"})
        local = gym.make(ENV, protocol="tools")
        try:
            _, info = remote.reset(seed=4)
            assert info["protocol"] == "tools" and info["tool_schemas"] == local.reset(seed=4)[1]["tool_schemas"]
            assert remote.unwrapped.config.protocol == "tools"
            got, want = remote.step(call), local.step(call)
            assert json.loads(got[0]) == json.loads(want[0]) == [
                {"role": "tool", "tool_call_id": "c1", "name": "code", "content": "32"}]
            assert remote.step(json.dumps({"role": "assistant", "content": "<answer>1</answer>"}))[2] is True
        finally:
            remote.close()
            local.close()
