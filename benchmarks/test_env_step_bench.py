"""Env step overhead with a no-op tool, in microseconds (target <= 50 us).

Overhead = step time minus the tool's own time; the same run measures the bare tool call
as the baseline, so the figure excludes tool work by construction. Peers in the same run:
GEM's ToolEnvWrapper with a one-regex no-op tool (its wrapper floor) and with GEM's own
PythonCodeTool with execution stubbed (what a GEM step costs before code runs).
"""

from __future__ import annotations

from coa_envs.bench import NoOpTool, noop_tool_step
from coa_envs.types import ToolContext


def test_env_step_noop_tool(benchmark):
    _, step = noop_tool_step()
    benchmark(step)
    micros = benchmark.stats.stats.median * 1e6
    benchmark.extra_info["step_us"] = round(micros, 2)
    print(f"\nenv step with no-op tool: {micros:.1f} us (target <= 50 us)")


def test_baseline_bare_tool_call(benchmark):
    tool, ctx = NoOpTool(), ToolContext()
    benchmark(tool.run, "print(1)", ctx)
    print(f"\nbare no-op tool call: {benchmark.stats.stats.median * 1e6:.2f} us")


def test_peer_gem_tool_wrapped_step(benchmark):
    """Peer baseline in the same run: GEM's ToolEnvWrapper stepping a no-op tool."""
    gem = __import__("pytest").importorskip("gem", reason="gem-llm (the `bench` extra) is not installed")
    import re

    from gem.tools.base_tool import BaseTool
    from gem.tools.tool_env_wrapper import ToolEnvWrapper

    class GemNoOpTool(BaseTool):
        tool_type = "python_code"
        _pattern = re.compile(r"<python>(.*?)</python>", re.S)

        def instruction_string(self) -> str:
            return "Wrap code in <python>...</python>."

        def execute_action(self, action):
            match = self._pattern.search(action)
            if match is None:
                return False, False, "", ""
            return True, False, "\n<observation>\nok\n</observation>\n\n", match.group(1)

    env = ToolEnvWrapper(gem.make("game:GuessTheNumber-v0-easy"), tools=[GemNoOpTool()], max_tool_uses=None)
    env.reset(seed=0)
    counter = iter(range(10**9))
    benchmark(lambda: env.step(f"<think>compute</think>\n<python>print({next(counter)})</python>"))
    print(f"\nGEM tool-wrapped step with no-op tool: {benchmark.stats.stats.median * 1e6:.1f} us")


def test_peer_gem_python_code_tool_step(benchmark, monkeypatch):
    """Peer baseline with GEM's own PythonCodeTool: its real action parsing, execution stubbed out.

    The minimal-regex peer above is a floor for GEM's wrapper; this one is what a GEM user
    pays per step before any code runs (GEM's tool then starts ``python -c``).
    """
    gem = __import__("pytest").importorskip("gem", reason="gem-llm (the `bench` extra) is not installed")
    import gem.tools.python_code_tool as gem_python_tool
    from gem.tools.tool_env_wrapper import ToolEnvWrapper

    monkeypatch.setattr(gem_python_tool, "run_python", lambda code, sandbox_type, timeout=5: (True, "ok", ""))
    env = ToolEnvWrapper(
        gem.make("game:GuessTheNumber-v0-easy"), tools=[gem_python_tool.PythonCodeTool()], max_tool_uses=None
    )
    env.reset(seed=0)
    counter = iter(range(10**9))
    benchmark(lambda: env.step(f"<think>compute</think>\n<python>print({next(counter)})</python>"))
    print(f"\nGEM PythonCodeTool step (execution stubbed): {benchmark.stats.stats.median * 1e6:.1f} us")
