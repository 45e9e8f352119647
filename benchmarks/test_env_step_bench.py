"""Env step overhead with a no-op tool, in microseconds (target <= 50 us).

Overhead = step time minus the tool's own time; the same run measures the bare tool call
as the baseline, so the figure excludes tool work by construction.
"""

from __future__ import annotations

import gymnasium as gym

import coa_envs  # noqa: F401
from coa_envs.types import ToolContext, ToolResult


class NoOpTool:
    name = "code"

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        return ToolResult(text="ok")


def _env():
    env = gym.make("coa/AIME24-v0").unwrapped
    env._tools = {"code": NoOpTool()}
    env.reset(seed=0)
    return env


def test_env_step_noop_tool(benchmark):
    env = _env()
    counter = iter(range(10**9))

    def step():
        # distinct queries so the repeated-query guard is not what we measure
        env.turn, env.done, env.history_chars = 0, False, 0
        return env.step(f"<think>compute</think>\n<code>print({next(counter)})</code>")

    benchmark(step)
    micros = benchmark.stats.stats.median * 1e6
    benchmark.extra_info["step_us"] = round(micros, 2)
    print(f"\nenv step with no-op tool: {micros:.1f} us (target <= 50 us)")


def test_baseline_bare_tool_call(benchmark):
    tool, ctx = NoOpTool(), ToolContext()
    benchmark(tool.run, "print(1)", ctx)
    print(f"\nbare no-op tool call: {benchmark.stats.stats.median * 1e6:.2f} us")
