"""``coa bench``: the library's own speed, measured on the machine it runs on.

Three checks, each against a baseline timed in the same call, so the ratios hold on a busy
or slow machine where absolute figures would not: protocol parsing of a realistic 8 kB turn
(vs one regex scan for tags), the env step with a no-op tool (vs calling the tool directly)
and the default sandbox backend (vs starting ``python -c``). The pytest-benchmark suites in
``benchmarks/`` go further (peers, throughput, retrieval, training); this is the quick check a
user runs after installing, with no test tooling.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from coa_envs.types import ToolContext, ToolResult

__all__ = ["CHECKS", "NoOpTool", "bench_env_step", "bench_protocol", "bench_sandbox", "noop_tool_step",
           "realistic_turn"]

_THINK = (
    "We need the population of the capital. First recall what we know about the country, "
    "its history and geography; then decide what to verify. Numbers like 3 < 4 and x > y appear. "
)
_TAGS = re.compile(r"</?[a-z_]+>")


def realistic_turn(size: int = 8192) -> str:
    """A ``size``-character turn shaped like a model's: plan, long think, reflection, one call."""
    body = (_THINK * (size // len(_THINK) + 1))[: size - 400]
    return (
        f"<plan>\n1. find the capital\n2. find its population\n</plan>\n<think>\n{body}\n</think>\n"
        "<reflection>the earlier search was too broad</reflection>\n"
        "<web_search>population of the capital city of Freedonia 2024 census</web_search>"
    )


class NoOpTool:
    """A ``code`` tool that does nothing, so a step's time is the env's own overhead."""

    name = "code"

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        return ToolResult(text="ok")


def _median_call_s(fn: Callable[[], Any], seconds: float, batch: int = 50) -> float:
    """Median seconds per call over batches of ``batch`` calls, for about ``seconds``."""
    fn()  # warm up: first calls pay imports and caches
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < 5:
        started = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - started) / batch)
    return statistics.median(samples)


def bench_protocol(seconds: float = 1.0) -> dict[str, float]:
    from coa_envs.protocol import parse_turn

    turn = realistic_turn()
    megabytes = len(turn.encode()) / 1e6
    ours = megabytes / _median_call_s(lambda: parse_turn(turn), seconds / 2)
    scan = megabytes / _median_call_s(lambda: _TAGS.findall(turn), seconds / 2)
    return {"parse_MB_per_s": ours, "regex_scan_MB_per_s": scan, "target_MB_per_s": 50.0}


def noop_tool_step() -> tuple[Any, Callable[[], Any]]:
    """``(env, step)``: an AIME env whose ``code`` tool is a no-op, and one mid-episode step of
    it with a fresh query each call (the repeated-query guard is not what is measured)."""
    import gymnasium as gym

    import coa_envs  # noqa: F401  (registers the ids)

    env = gym.make("coa/AIME24-v0").unwrapped
    env._tools = {"code": NoOpTool()}
    env.reset(seed=0)
    counter = iter(range(10**12))

    def step() -> Any:
        env.turn, env.done, env.history_chars = 0, False, 0  # stay mid-episode
        return env.step(f"<think>compute</think>\n<code>print({next(counter)})</code>")

    return env, step


def bench_env_step(seconds: float = 1.0) -> dict[str, float]:
    env, step = noop_tool_step()
    tool, ctx = NoOpTool(), ToolContext()
    step_s = _median_call_s(step, seconds / 2)
    tool_s = _median_call_s(lambda: tool.run("print(1)", ctx), seconds / 2)
    env.close()
    return {"step_us": step_s * 1e6, "bare_tool_call_us": tool_s * 1e6,
            "overhead_us": (step_s - tool_s) * 1e6, "target_overhead_us": 50.0}


def bench_sandbox(runs: int = 40) -> dict[str, float | str]:
    """Default backend round trip, requests 10 ms apart (as tool calls come between turns)."""
    import sandbox

    backend = sandbox.default_backend()
    for _ in range(5):
        backend.run("print(1 + 1)")
    ours = []
    for _ in range(runs):
        time.sleep(0.01)
        started = time.perf_counter()
        backend.run("print(1 + 1)")
        ours.append(time.perf_counter() - started)
    cold = []
    for _ in range(max(5, runs // 4)):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "print(1 + 1)"], capture_output=True, check=True)
        cold.append(time.perf_counter() - started)
    ours_ms, cold_ms = statistics.median(ours) * 1e3, statistics.median(cold) * 1e3
    return {"backend": backend.name, "p50_ms": ours_ms, "python_c_p50_ms": cold_ms, "speedup": cold_ms / ours_ms}


CHECKS: dict[str, Callable[..., dict[str, Any]]] = {
    "protocol": bench_protocol,
    "env": bench_env_step,
    "sandbox": bench_sandbox,
}
