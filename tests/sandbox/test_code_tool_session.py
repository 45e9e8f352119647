"""The ``code`` tool's stateful mode: one sandbox Session per episode, closed by the env."""

from __future__ import annotations

import gymnasium as gym

import coa_envs  # noqa: F401  (registers the ids)
from coa_envs.tools.code import build
from coa_envs.types import ErrorKind, ToolContext


def test_stateful_tool_keeps_variables_within_an_episode_only(pool):
    tool = build("default", stateful=True, wall_s=3)
    first, second = ToolContext(episode_id="a"), ToolContext(episode_id="b")
    try:
        assert tool.run("counter = 41", first).ok
        assert tool.run("counter += 1\nprint(counter)", first).text == "42"
        other = tool.run("print(counter)", second)
        assert not other.ok and "NameError" in other.text
        tool.end_episode(first)
        assert "code_session" not in first.state
        fresh = tool.run("print('counter' in globals())", first)
        assert fresh.text == "False"
    finally:
        tool.close()


def test_stateless_tool_forgets_between_calls(pool):
    tool = build("default")
    ctx = ToolContext()
    tool.run("kept = 1", ctx)
    assert tool.run("print(kept)", ctx).error_kind is ErrorKind.TOOL_ERROR
    assert "code_session" not in ctx.state


def test_env_with_stateful_code_tool_releases_the_session_on_reset(pool):
    env = gym.make("coa/LiveCodeBench-v5", tools={"code": {"backend": "default", "stateful": True}})
    try:
        env.reset(seed=0)
        env.step("<code>x = 5</code>")
        observation = env.step("<code>print(x * 2)</code>")[0]
        assert "10" in observation
        session = env.unwrapped.ctx.state.get("code_session")
        assert session is not None
        env.reset(seed=1)
        assert session._closed  # the previous episode's interpreter is gone
        observation = env.step("<code>print('x' in globals())</code>")[0]
        assert "False" in observation
    finally:
        env.close()
