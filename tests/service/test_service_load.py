"""256 concurrent sessions against one ``coa serve-env`` process on loopback.

Every session is open at the same moment (a barrier), plays its own task with actions that
carry its own number (two malformed turns whose corrective observations echo the tag, one
real ``code`` call whose output is the number, then a gold or a wrong answer), and checks
its whole transcript: a reply that belonged to another session, a lost reply or a wrong
reward fails the test. While all 256 are open, a 257th is refused with CAPACITY_REACHED.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("websockets", reason="coa serve-env needs the [serve] extra")

import gymnasium as gym
import httpx

import coa_envs  # noqa: F401
from agents.oracle import oracle_answer_text
from coa_envs.service import RemoteEnv, RemoteEnvError
from tests.service.servers import serve_process

ENV = "coa/MATH500-v1"
SESSIONS = 256


def _play(url: str, index: int, tasks: list, barrier: threading.Barrier) -> dict:
    env = RemoteEnv(url, ENV, timeout_s=300)
    barrier.wait(timeout=300)
    task = tasks[index]
    latencies = []

    def step(action: str):
        started = time.perf_counter()
        out = env.step(action)
        latencies.append(time.perf_counter() - started)
        return out

    try:
        prompt, info = env.reset(seed=index, options={"task_index": index})
        assert info["task_id"] == task.task_id and prompt.endswith(task.question)
        for turn in range(2):
            tag = f"probe_{index}_{turn}"
            observation, reward, terminated, truncated, info = step(f"<think>s{index}</think><{tag}>x</{tag}>")
            assert f"<{tag}>" in observation and observation.count("<probe_") == 1, observation
            assert info["protocol_error"] == "unknown_tag" and (reward, terminated, truncated) == (0.0, False, False)
        observation, *_ = step(f"<code>print({index} * 1000 + 7)</code>")
        assert observation.split() == ["<observation>", str(index * 1000 + 7), "</observation>"], observation
        solve = index % 2 == 0
        answer = oracle_answer_text(task, "math") if solve else "<answer>zzqx-not-an-answer</answer>"
        _, reward, terminated, _, info = step(answer)
        assert terminated and reward == (1.0 if solve else 0.0), (index, info)
        state = env.state()
        assert state["step_count"] == 4 and state["task_id"] == task.task_id and state["done"]
    finally:
        env.close()
    return {"index": index, "latencies": latencies}


def test_256_concurrent_sessions_complete_with_nothing_lost_or_crossed():
    tasks = gym.make(ENV).unwrapped.tasks
    with serve_process(ENV, "--max-sessions", str(SESSIONS), "--step-threads", "64") as (url, _process):
        refused: list[str] = []

        def over_the_cap() -> None:  # runs once, while all SESSIONS sessions are open
            try:
                RemoteEnv(url, ENV).close()
            except RemoteEnvError as exc:
                refused.append(exc.code)

        barrier = threading.Barrier(SESSIONS, action=over_the_cap)
        started = time.perf_counter()
        with ThreadPoolExecutor(SESSIONS) as pool:
            results = list(pool.map(lambda i: _play(url, i, tasks, barrier), range(SESSIONS)))
        wall = time.perf_counter() - started
        assert refused == ["CAPACITY_REACHED"]
        assert sorted(r["index"] for r in results) == list(range(SESSIONS))
        assert httpx.get(f"{url}/health", timeout=10).json()["sessions"] == 0  # every session closed
    latencies = sorted(x for r in results for x in r["latencies"])
    p50, p99 = statistics.median(latencies), latencies[int(0.99 * (len(latencies) - 1))]
    print(f"\n{SESSIONS} concurrent sessions x 4 steps (incl. {SESSIONS} sandboxed code runs): wall {wall:.1f} s, "
          f"{len(latencies) / wall:.0f} steps/s, step latency p50 {p50 * 1e3:.0f} ms p99 {p99 * 1e3:.0f} ms "
          "(client and server on this machine)")
