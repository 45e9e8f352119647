"""Record/replay makes web episodes reproducible: a replayed ``coa/MiniWeb-v0`` episode sees
exactly the observations and rewards of the recorded one, without contacting any server.

A fixed ``task_options.port`` keeps the task URLs (and so the cache keys) the same for a
second env with its own, fresh server, as in a later process or on another machine.
"""

from __future__ import annotations

import socket
from pathlib import Path

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _make(mode: str, db: Path, port: int) -> gym.Env:
    cache = {"cache": {"mode": mode, "path": str(db)}}
    return gym.make("coa/MiniWeb-v0", task_options={"port": port, "slow_delay_s": 0.2},
                    tools={"web_search": cache, "crawl_page": cache})


def _transcripts(env: gym.Env) -> dict[str, list[tuple[str, float, object]]]:
    """Every task's oracle episode as (observation, reward, error kind) per step."""
    transcripts = {}
    for task in env.unwrapped.tasks:
        env.reset(options={"task_id": task.task_id})
        steps = []
        for action in task.metadata["oracle_actions"]:
            observation, reward, _, _, info = env.step(action)
            steps.append((observation, float(reward), info["error_kind"]))
        transcripts[task.task_id] = steps
    return transcripts


def test_replayed_episodes_equal_the_recorded_ones_and_touch_no_server(tmp_path):
    port, db = _free_port(), tmp_path / "miniweb.sqlite"
    recorder = _make("record", db, port)
    try:
        recorded = _transcripts(recorder)
        recording_server = recorder.unwrapped._runtime.server
        assert recording_server.hits.total() > 0  # the recording really crawled the site
    finally:
        recorder.close()
    assert recording_server.closed
    assert all(steps[-1][1] == 1.0 for steps in recorded.values()), recorded

    replayer = _make("replay", db, port)
    try:
        server = replayer.unwrapped._runtime.server
        assert server is not recording_server and server.base_url == recording_server.base_url
        assert _transcripts(replayer) == recorded
        assert server.hits.total() == 0  # every observation came from the cache
        replayer.reset(seed=0)
        observation, _, terminated, _, info = replayer.step(
            f"<crawl_page>{server.url('/never-recorded.html')}</crawl_page>")
        assert not terminated and info["error_kind"] == "cache_miss" and "No recorded result" in observation
        assert server.hits.total() == 0  # strict replay: a miss is an observation, not a live fetch
    finally:
        replayer.close()


def test_port_option_is_validated_and_a_busy_port_is_a_clear_error():
    with pytest.raises(ValueError, match="port"):
        gym.make("coa/MiniWeb-v0", task_options={"port": 70000})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        with pytest.raises(OSError, match=r"task_options\.port"):
            gym.make("coa/MiniWeb-v0", task_options={"port": busy.getsockname()[1]})
