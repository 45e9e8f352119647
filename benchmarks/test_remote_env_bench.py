"""Per-step overhead of a served env (``coa/Remote-v0`` over ``coa serve-env``) vs the same env in process.

Both arms step the same env id with the same overrides in the same run: the server is a
separate process on loopback (as it would be on another machine, minus the network), the
in-process env is ``gym.make`` of the id. Two workloads: a turn the env answers without a
tool (a corrective observation: the transport is nearly all of the remote step) and a real
sandboxed ``code`` call. Arms are interleaved in rounds, in alternating order, and each
round's median per-step time is kept; the figures are the median over rounds with the
min-max spread of the per-round overhead. Reported, not asserted.
"""

from __future__ import annotations

import itertools
import statistics
import time

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("websockets", reason="coa serve-env needs the [serve] extra")

import gymnasium as gym

import coa_envs  # noqa: F401
from coa_envs.registry import REMOTE_ID
from tests.service.servers import serve_process

ENV = "coa/AIME24-v1"
LONG = {"max_turns": 10**6, "context_budget_chars": 10**9}  # stay mid-episode for the whole run
ROUNDS, STEPS = 12, 40


def _round(env, action_of, steps: int) -> float:
    env.reset(seed=0)
    times = []
    for _ in range(steps):
        action = action_of()
        started = time.perf_counter()
        env.step(action)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@pytest.mark.parametrize("workload", ["no_tool", "code_tool"])
def test_remote_step_overhead_vs_in_process(workload):
    counter = itertools.count()
    if workload == "no_tool":
        def action_of() -> str:
            n = next(counter)
            return f"<think>step {n}</think><probe_{n}>x</probe_{n}>"
    else:
        def action_of() -> str:
            return f"<code>print({next(counter)})</code>"

    local = gym.make(ENV, **LONG)
    with serve_process(ENV, *itertools.chain.from_iterable(("-e", f"{k}={v}") for k, v in LONG.items())) as (
            url, _process):
        remote = gym.make(REMOTE_ID, base_url=url, env_id=ENV, overrides=LONG)
        arms = {"in_process": local, "remote": remote}
        for env in arms.values():  # warm up: imports, sandbox workers, the connection
            _round(env, action_of, 5)
        per_round: dict[str, list[float]] = {name: [] for name in arms}
        for index in range(ROUNDS):
            order = list(arms) if index % 2 == 0 else list(reversed(arms))
            for name in order:
                per_round[name].append(_round(arms[name], action_of, STEPS))
        remote.close()
    local.close()
    overhead = [r - p for r, p in zip(per_round["remote"], per_round["in_process"], strict=True)]
    local_us = statistics.median(per_round["in_process"]) * 1e6
    remote_us = statistics.median(per_round["remote"]) * 1e6
    print(f"\n{workload}: in-process {local_us:.0f} us/step, remote {remote_us:.0f} us/step, "
          f"overhead {statistics.median(overhead) * 1e6:.0f} us (rounds: {min(overhead) * 1e6:.0f}.."
          f"{max(overhead) * 1e6:.0f} us), ratio {remote_us / local_us:.2f}x "
          f"[{ROUNDS} interleaved rounds x {STEPS} steps, loopback]")
