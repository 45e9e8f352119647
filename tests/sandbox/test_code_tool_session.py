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


def test_stateful_mode_needs_a_backend_that_can_keep_an_interpreter():
    import pytest

    with pytest.raises(ValueError, match="cannot keep state"):
        build("bwrap", stateful=True)
    with pytest.raises(ValueError, match="unknown code backend"):
        build("chroot")


def test_stateful_tool_on_the_subprocess_backend_runs_unjailed_sessions():
    tool = build("subprocess", stateful=True, wall_s=3)
    ctx = ToolContext()
    try:
        assert tool.run("y = 6", ctx).ok
        assert tool.run("print(y * 7)", ctx).text == "42"
        assert ctx.state["code_session"].jail is False
    finally:
        tool.end_episode(ctx)
        tool.close()


def test_tool_reports_every_failure_as_an_error_kind(pool):
    tool = build("default", wall_s=2, cpu_s=1, max_output_chars=1000)
    ctx = ToolContext()
    cases = {
        "raise ValueError('x')": ErrorKind.TOOL_ERROR,
        "import time\ntime.sleep(60)": ErrorKind.TOOL_TIMEOUT,
        "import socket\nsocket.create_connection(('127.0.0.1', 9))": ErrorKind.SANDBOX_VIOLATION,
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)": ErrorKind.TOOL_ERROR,
    }
    for code, kind in cases.items():
        result = tool.run(code, ctx)
        assert (result.ok, result.error_kind) == (False, kind), (code, result)
    long = tool.run("print('z' * 5000)", ctx)
    assert long.ok and "truncated" in long.text


def test_tool_calls_from_many_threads_get_their_own_output(pool):
    from concurrent.futures import ThreadPoolExecutor

    tool = build("pool", wall_s=5)  # a private pool, built once however many threads race for it
    try:
        with ThreadPoolExecutor(8) as executor:
            texts = list(executor.map(lambda i: tool.run(f"print({i} ** 2)", ToolContext()).text, range(24)))
        assert texts == [str(i**2) for i in range(24)]
    finally:
        tool.close()


def test_seed_preset_by_name_with_overrides(pool):
    import pytest

    from sandbox import NSJAIL_SEED_PRESET

    tool = build("default", preset="nsjail_seed")
    assert tool.limits == NSJAIL_SEED_PRESET
    text = tool.run("print('x' * 5000)", ToolContext()).text
    assert "truncated at 1536 characters" in text
    assert build(preset="nsjail_seed", wall_s=2).limits == NSJAIL_SEED_PRESET.with_(wall_s=2)
    with pytest.raises(ValueError, match="unknown sandbox preset"):
        build(preset="gvisor")


def test_env_config_selects_the_preset():
    env = gym.make("coa/LiveCodeBench-v5", tools={"code": {"backend": "default", "preset": "nsjail_seed"}})
    try:
        assert env.unwrapped.tools["code"].limits.max_output_chars == 1536
    finally:
        env.close()
