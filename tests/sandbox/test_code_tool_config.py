"""The ``code`` tool's sandbox configuration: quotas and granted paths as tool config, checked
when the tool is built (a bad config never waits for the model's first call to fail)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401  (registers the ids)
import sandbox
from coa_envs.tools.code import build
from coa_envs.types import ErrorKind, ToolContext


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        ({"memory_gb": 2}, ValueError, "unknown code tool option.*memory_gb.*allowed:.*max_files"),
        ({"read_only_paths": ["/no/such/data"]}, ValueError, "does not exist"),
        ({"writable_paths": ["relative"]}, ValueError, "not an absolute path"),
        ({"max_files": 0}, ValueError, "max_files"),
        ({"backend": "pool", "network": True}, sandbox.UnsupportedLimits, "network=True"),
        ({"stateful": True, "network": True}, sandbox.UnsupportedLimits, "network=True"),
    ],
)
def test_bad_sandbox_config_fails_when_the_tool_is_built(config, error, message):
    with pytest.raises(error, match=message):
        build(**config)


def test_quotas_from_tool_config_reach_the_run(pool):
    tool = build("default", max_files=50, disk_mb=4)
    try:
        assert (tool.limits.max_files, tool.limits.disk_mb) == (50, 4)
        flood = tool.run("n = 0\nwhile True:\n    open(f'f{n}', 'w').close()\n    n += 1", ToolContext())
        assert not flood.ok and flood.error_kind is ErrorKind.TOOL_ERROR
        assert "file quota used up: 50 files" in flood.text and flood.details["status"] == "output_limit"
    finally:
        tool.close()


def test_granted_paths_from_env_config_are_visible_and_nothing_beside_them(pool, tmp_path):
    granted, private = tmp_path / "granted", tmp_path / "private"
    granted.mkdir()
    private.mkdir()
    (granted / "data.txt").write_text("42")
    (private / "data.txt").write_text("secret")
    tools = {"code": {"backend": "default", "read_only_paths": [str(granted)]}}
    env = gym.make("coa/AIME24-v1", tools=tools)
    try:
        env.reset(seed=0)
        code = f"print(open({str(granted / 'data.txt')!r}).read())\nprint(open({str(private / 'data.txt')!r}).read())"
        observation = env.step(f"<code>{code}</code>")[0]
        assert "42" in observation and "secret" not in observation and "FileNotFoundError" in observation
    finally:
        env.close()


def test_stateful_sessions_get_the_grants_too(pool, tmp_path):
    shared = tmp_path / "shared"  # readable by the run's uid (pytest's tmp_path itself is 0700)
    shared.mkdir(mode=0o755)
    (shared / "notes.txt").write_text("kept")
    tool = build("default", stateful=True, read_only_paths=[str(shared)])
    ctx = ToolContext()
    try:
        assert tool.run(f"text = open({str(shared / 'notes.txt')!r}).read()", ctx).ok
        assert tool.run("print(text)", ctx).text == "kept"
    finally:
        tool.end_episode(ctx)
        tool.close()
