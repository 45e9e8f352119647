"""What the verdict guards cost: math's one-answer check and code's host-side comparison.

Arms, interleaved round by round in a shuffled order so machine load hits every arm alike:

* ``math_v2``: the ``math_verify`` term (candidates, alternatives, one math-verify verdict)
  over ten replies (right, wrong, hedged), on the main thread;
* ``math_floor``: the least any math-verify reward does for the same replies: parse the gold
  and the reply once each and call ``verify`` (what the v1 term did before its fallback);
* ``code_v2``: the ``code_tests`` term (``max_parallel=1``) on a four-case LeetCode-style task (a sandbox run per
  case through the driver, results compared on the host);
* ``code_floor``: the same four runs of the bare solution with a one-line call appended,
  through ``sandbox.run`` (no driver, no comparison).

Reported: per-reply milliseconds per arm (median over rounds, min-max spread) and the ratios
v2/floor per round (median and spread). Run:
``flock /tmp/bench.lock pytest benchmarks/test_reward_verdict_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import random
import statistics
import time

from coa_envs.rewards.code_tests import build as build_code
from coa_envs.rewards.math_verify import build as build_math
from coa_envs.types import Task

ROUNDS = 8
GOLD = "\\frac{3}{4}"
REPLIES = ["\\boxed{\\frac{3}{4}}", "\\boxed{0.75}", "\\boxed{\\frac{1}{2}}", "The final answer is $\\frac{3}{4}$.",
           "\\boxed{1} The final answer is $\\frac{3}{4}$.", "0.5 or 0.75", "\\boxed{\\{0.5, 0.75\\}}",
           "\\boxed{x = \\frac{3}{4}}", "\\boxed{3/4}", "\\boxed{\\sqrt{2}}"]
SOLUTION = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
CODE = Task("t", "add", tests={"kind": "functional", "func_name": "add", "cases": [
    {"input": f"{i}\n{i + 1}", "output": str(2 * i + 1), "public": False} for i in range(4)]})


def _math_floor() -> None:
    from math_verify import parse, verify

    gold = parse(f"\\boxed{{{GOLD}}}")
    for reply in REPLIES:
        verify(gold, parse(reply))


def _code_floor() -> None:
    import sandbox

    for case in CODE.tests["cases"]:
        a, b = case["input"].split("\n")
        sandbox.run(SOLUTION + f"print(Solution().add({a}, {b}))")


def _measure(arms: dict) -> dict[str, list[float]]:
    """Milliseconds per reply (or per answer) for each arm and round, arms shuffled each round."""
    order, shuffle = list(arms), random.Random(0).shuffle
    for call, _ in arms.values():  # warm up: imports, the sandbox pool
        call()
    per_round: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(ROUNDS):
        shuffle(order)
        for name in order:
            call, units = arms[name]
            started = time.perf_counter()
            call()
            per_round[name].append((time.perf_counter() - started) / units * 1e3)
    return per_round


def test_verdict_guards_cost_against_the_floor_in_the_same_run(benchmark):
    math_reward, code_reward = build_math(), build_code(max_parallel=1)  # sequential, like the floor
    task = Task("m", "q", gold=(GOLD,))
    arms = {
        "math_v2": (lambda: [math_reward(r, task) for r in REPLIES], len(REPLIES)),
        "math_floor": (_math_floor, len(REPLIES)),
        "code_v2": (lambda: code_reward(f"```python\n{SOLUTION}\n```", CODE), 1),
        "code_floor": (_code_floor, 1),
    }
    assert code_reward(f"```python\n{SOLUTION}\n```", CODE).score == 1.0  # the arms score what they should
    per_round = benchmark.pedantic(_measure, args=(arms,), rounds=1, iterations=1)
    for name, values in per_round.items():
        print(f"{name:11s} median {statistics.median(values):8.2f} ms  (min {min(values):.2f}, max {max(values):.2f})")
        benchmark.extra_info[f"{name}_ms"] = round(statistics.median(values), 3)
    for family in ("math", "code"):
        ratios = [a / b for a, b in zip(per_round[f"{family}_v2"], per_round[f"{family}_floor"], strict=True)]
        spread = f"min {min(ratios):.2f}, max {max(ratios):.2f}"
        print(f"{family}: v2/floor median {statistics.median(ratios):.2f} ({spread})")
        benchmark.extra_info[f"{family}_ratio"] = round(statistics.median(ratios), 3)
