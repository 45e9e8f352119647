"""Sandbox latency and throughput, each figure against a baseline measured in the same run.

* trivial snippet round trip: the warm pool (default backend) back-to-back (sequential) and
  with requests 10 ms apart (paced), against plain ``python -c`` — the three arms interleaved
  over several rounds (see :func:`coa_envs.bench.bench_sandbox`), the ratios' spread and the
  CPU per run across the caller, the workers and their run children reported;
  targets: sequential >= 10x faster than ``python -c``, paced p50 <= 2 ms;
* p50/p95 of plain ``python -c``, bubblewrap and nsjail when installed;
* throughput: 1,000 snippets from 64 concurrent callers, zero lost or duplicated results;
* a snippet importing numpy: warm pool vs a cold subprocess;
* extras: nsjail when installed, a stateful session cell, and the code reward on a
  6-test answer with its tests in parallel vs one after another;
* what the cgroup per run costs: the default pool against a pool in the per-process mode
  (``accounting="process"``: no cgroup), rounds alternated in the same run.

The plain ``python -c`` start is also the peer baseline: GEM's code tool pays one per call.

Run: ``pytest benchmarks/test_sandbox_bench.py -s``. The summary test prints the table.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import sandbox
from sandbox import Limits, Status

TRIVIAL = "print(1 + 1)"
NUMPY = "import numpy as np\nprint(int(np.arange(10).sum()))"
RESULTS: dict[str, dict[str, float]] = {}


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1e3,
        "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1e3,
        "n": len(ordered),
    }


def _record(benchmark, name: str) -> None:
    if benchmark.stats is None:  # --benchmark-disable: each body ran once as a test, nothing was timed
        return
    stats = _percentiles(list(benchmark.stats.stats.data))
    RESULTS[name] = stats
    benchmark.extra_info.update({k: round(v, 3) for k, v in stats.items()})


def _python_c(*flags: str) -> Callable[[str], str]:
    """Runs a snippet in a fresh ``python [flags] -c``: the baseline every sandbox is timed against."""
    return lambda code: subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                                       check=True).stdout


def _in(backend: Any) -> Callable[[str], str]:
    """Runs a snippet in ``backend`` under the default limits."""
    return lambda code: backend.run(code, limits=Limits()).stdout


def _time_runs(benchmark, name: str, run: Callable[[str], str], code: str, expected: str, *, rounds: int = 40,
               warmup: int = 3) -> None:
    """Time ``run(code)`` (checking its output each time) and keep its percentiles under ``name``."""

    def once() -> None:
        assert run(code) == expected

    benchmark.pedantic(once, rounds=rounds, warmup_rounds=warmup)
    _record(benchmark, name)


@pytest.fixture(scope="module")
def pool():
    backend = sandbox.default_backend()
    if backend.name != "pool":
        pytest.skip(f"default backend is {backend.name!r}, not the pool")
    for _ in range(20):  # warm every worker
        assert backend.run(TRIVIAL, limits=Limits()).stdout == "2\n"
    return backend


def test_baseline_plain_subprocess(benchmark):
    _time_runs(benchmark, "subprocess", _python_c(), TRIVIAL, "2\n")


def test_baseline_bare_interpreter_start(benchmark):
    """``python -I -S -c``: no site-packages scan (.pth hooks can cost ~100 ms on their own)."""
    _time_runs(benchmark, "bare_python", _python_c("-I", "-S"), TRIVIAL, "2\n")


def test_pool_sequential_and_paced_against_python_c(pool):
    """Back-to-back and paced round trips and ``python -c`` starts, interleaved over 5 rounds."""
    from coa_envs.bench import bench_sandbox

    report = bench_sandbox(runs=200, repeats=5, backend=pool)
    RESULTS["interleaved"] = report
    assert report["sequential_p50_ms"] > 0 and report["python_c_p50_ms"] > 0


def test_cgroup_per_run_against_the_per_process_mode(pool):
    """Sequential round trip and CPU per run of the default pool (a cgroup per run) and of the
    same pool in the per-process mode, 3 rounds each, alternated."""
    from coa_envs.bench import bench_sandbox

    other = sandbox.get_backend("pool", accounting="process")
    rounds: dict[str, list[dict]] = {"cgroup": [], "process": []}
    try:
        for index in range(6):
            name = ("cgroup", "process")[(index + index // 2) % 2]  # c p p c c p: neither always first
            rounds[name].append(bench_sandbox(runs=100, repeats=1, backend=pool if name == "cgroup" else other))
    finally:
        other.close()
    RESULTS["accounting"] = {
        name: {
            "sequential_p50_ms": [r["sequential_p50_ms"] for r in reports],
            "paced_p50_ms": [r["paced_p50_ms"] for r in reports],
            "cpu_ms_per_run": [r["cpu_ms_per_run"]["median"] for r in reports],
            "speedup": [r["sequential_speedup"]["median"] for r in reports],
        }
        for name, reports in rounds.items()
    }
    assert all(len(reports) == 3 for reports in rounds.values())


def test_bubblewrap_round_trip(benchmark):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    backend = sandbox.get_backend("bwrap")
    try:
        _time_runs(benchmark, "bwrap", _in(backend), TRIVIAL, "2\n")
    finally:
        backend.close()


def test_nsjail_round_trip(benchmark):
    try:
        backend = sandbox.get_backend("nsjail")
    except sandbox.BackendUnavailable as exc:
        pytest.skip(str(exc))
    try:
        _time_runs(benchmark, "nsjail", _in(backend), TRIVIAL, "2\n")
    finally:
        backend.close()


def test_session_cell_round_trip(benchmark, pool):
    with sandbox.Session() as session:
        session.run("total = 0")

        def once() -> None:
            assert session.run("total += 1\nprint(1 + 1)").stdout == "2\n"

        benchmark.pedantic(once, rounds=200, warmup_rounds=10)
    _record(benchmark, "session")


def _reward_case():
    from coa_envs.rewards.code_tests import build
    from coa_envs.types import Task

    cases = [{"input": f"{i}\n", "output": f"{i * i}\n"} for i in range(6)]
    task = Task("bench", "square", tests={"kind": "stdin", "cases": cases})
    return build, task, "```python\nn = int(input())\nprint(n * n)\n```"


@pytest.mark.parametrize("parallel", [1, 8], ids=["serial", "parallel"])
def test_code_reward_six_tests(benchmark, pool, parallel):
    build, task, answer = _reward_case()
    reward = build(max_parallel=parallel)

    def once() -> None:
        assert reward(answer, task).score == 1.0

    benchmark.pedantic(once, rounds=40, warmup_rounds=3)
    _record(benchmark, f"reward_{'parallel' if parallel > 1 else 'serial'}")


@pytest.mark.parametrize("sandbox_type", ["none", "bwrap"])
def test_peer_gem_code_tool(benchmark, sandbox_type, tmp_path, monkeypatch):
    """GEM's ``PythonCodeTool`` (pip ``gem-llm``), the peer: one ``python -c`` (in bwrap) per call."""
    try:
        from gem.tools.python_code_tool import PythonCodeTool
    except ImportError as exc:
        pytest.skip(f"gem-llm not installed: {exc}")
    if sandbox_type == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    monkeypatch.chdir(tmp_path)  # GEM makes its temporary directories in the working directory
    # GEM runs `python` from PATH: put the real interpreter first, not a pyenv shim script.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    tool = PythonCodeTool(sandbox_type=sandbox_type)
    expected = "Code execution result: 2\n\n"
    try:
        probe = tool.execute_action(f"<python>{TRIVIAL}</python>")[2]
    except Exception as exc:  # e.g. bwrap or python missing where GEM looks for them
        probe = f"{type(exc).__name__}: {exc}"
    if probe != expected:  # a peer that cannot run here is skipped with its own words, never a failure
        pytest.skip(f"GEM's code tool ({sandbox_type}) cannot run here: {probe.strip()[-300:]!r}")

    def once() -> None:
        observation = tool.execute_action(f"<python>{TRIVIAL}</python>")[2]
        assert observation == expected

    benchmark.pedantic(once, rounds=40, warmup_rounds=3)
    _record(benchmark, f"gem_{sandbox_type}")


def test_throughput_1000_snippets_64_callers(benchmark, pool):
    def burst() -> float:
        started = time.perf_counter()
        with ThreadPoolExecutor(64) as callers:
            results = list(callers.map(lambda i: pool.run(f"print({i})", limits=Limits()), range(1000)))
        elapsed = time.perf_counter() - started
        outputs = [r.stdout for r in results]
        assert all(r.status is Status.OK for r in results)
        assert outputs == [f"{i}\n" for i in range(1000)]  # none lost, none duplicated
        return 1000 / elapsed

    runs_per_s = benchmark.pedantic(burst, rounds=1, iterations=1)
    RESULTS["throughput"] = {"runs_per_s": runs_per_s, "lost": 0, "duplicated": 0}
    benchmark.extra_info["runs_per_s"] = round(runs_per_s, 1)


def test_numpy_snippet_cold_subprocess(benchmark):
    _time_runs(benchmark, "numpy_cold", _python_c(), NUMPY, "45\n", rounds=15, warmup=2)


def test_numpy_snippet_warm_pool(benchmark, pool):
    _time_runs(benchmark, "numpy_warm", _in(pool), NUMPY, "45\n", rounds=200, warmup=10)


def test_summary():
    if "interleaved" not in RESULTS:
        pytest.skip("run the whole module to get the summary")
    report = RESULTS["interleaved"]
    lines = ["", "sandbox benchmark (same run, same machine):"]
    names = ("subprocess", "bare_python", "gem_none", "gem_bwrap", "bwrap", "nsjail", "session")
    for name in (*names, "numpy_cold", "numpy_warm", "reward_serial", "reward_parallel"):
        if name in RESULTS:
            r = RESULTS[name]
            lines.append(f"  {name:<15} p50 {r['p50_ms']:8.2f} ms   p95 {r['p95_ms']:8.2f} ms   (n={r['n']:.0f})")
    base = report["python_c_p50_ms"]
    lines.append(f"  interleaved over {report['repeats']} rounds of {report['runs']} runs ({report['backend']}), "
                 f"python -c p50 {base:.1f} ms:")
    for arm, what, target in (("sequential", "back-to-back", "target >= 10x"), ("paced", "10 ms apart", "p50 <= 2 ms")):
        spread = report[f"{arm}_speedup"]
        lines.append(f"    {what:<13} p50 {report[f'{arm}_p50_ms']:6.2f} ms, {spread['median']:5.1f}x faster than "
                     f"python -c (rounds {spread['min']:.1f}-{spread['max']:.1f}; {target})")
    cpu, machine = report["cpu_ms_per_run"], report["machine_cpu_ms_per_run"]
    lines.append(f"    CPU per run, caller + workers + run children: {cpu['median']:.1f} ms "
                 f"({cpu['min']:.1f}-{cpu['max']:.1f}); machine-wide {machine['median']:.1f} ms (other load included)")
    sequential = report["sequential_p50_ms"]
    for peer, label in (("gem_none", "GEM code tool (no sandbox)"), ("gem_bwrap", "GEM code tool (bwrap)"),
                        ("bwrap", "bubblewrap"), ("nsjail", "nsjail"), ("bare_python", "bare `python -I -S -c`")):
        if peer in RESULTS:
            lines.append(f"  pool (sequential) vs {label} (p50): {RESULTS[peer]['p50_ms'] / sequential:.1f}x faster")
    if "session" in RESULTS and "subprocess" in RESULTS:
        ratio = RESULTS["subprocess"]["p50_ms"] / RESULTS["session"]["p50_ms"]
        lines.append(f"  stateful session cell vs plain subprocess (p50): {ratio:.1f}x faster")
    if "reward_serial" in RESULTS and "reward_parallel" in RESULTS:
        ratio = RESULTS["reward_serial"]["p50_ms"] / RESULTS["reward_parallel"]["p50_ms"]
        lines.append(f"  code reward, 6 tests: parallel {ratio:.1f}x faster than one after another")
    if "numpy_cold" in RESULTS and "numpy_warm" in RESULTS:
        ratio = RESULTS["numpy_cold"]["p50_ms"] / RESULTS["numpy_warm"]["p50_ms"]
        lines.append(f"  numpy snippet: warm pool {ratio:.1f}x faster than a cold subprocess")
    if "accounting" in RESULTS:
        for name, figures in RESULTS["accounting"].items():
            seq, paced, cpu = figures["sequential_p50_ms"], figures["paced_p50_ms"], figures["cpu_ms_per_run"]
            lines.append(f"  pool, {name + ' accounting:':<20} back-to-back p50 {statistics.median(seq):5.2f} ms "
                         f"({min(seq):.2f}-{max(seq):.2f}), paced {statistics.median(paced):5.2f} ms, CPU per run "
                         f"{statistics.median(cpu):4.1f} ms ({min(cpu):.1f}-{max(cpu):.1f}), "
                         f"{statistics.median(figures['speedup']):.1f}x python -c")
    if "throughput" in RESULTS:
        lines.append(
            f"  1000 snippets / 64 callers: {RESULTS['throughput']['runs_per_s']:.0f} runs/s, 0 lost, 0 duplicated"
        )
    print("\n".join(lines))
