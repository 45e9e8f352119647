"""Sandbox latency and throughput, each figure against a baseline measured in the same run.

* trivial snippet round trip, p50/p95: plain ``subprocess.run([sys.executable, "-c", code])``
  (baseline), the warm pool (default backend), bubblewrap when installed;
  target: pool p50 <= 3 ms and >= 10x faster than the baseline;
* throughput: 1,000 snippets from 64 concurrent callers, zero lost or duplicated results;
* a snippet importing numpy: warm pool vs a cold subprocess.

Run: ``pytest benchmarks/test_sandbox_bench.py -s``. The summary test prints the table.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

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
    stats = _percentiles(list(benchmark.stats.stats.data))
    RESULTS[name] = stats
    benchmark.extra_info.update({k: round(v, 3) for k, v in stats.items()})


@pytest.fixture(scope="module")
def pool():
    backend = sandbox.default_backend()
    if backend.name != "pool":
        pytest.skip(f"default backend is {backend.name!r}, not the pool")
    for _ in range(20):  # warm every worker
        assert backend.run(TRIVIAL, limits=Limits()).stdout == "2\n"
    return backend


def test_baseline_plain_subprocess(benchmark):
    def once() -> None:
        out = subprocess.run([sys.executable, "-c", TRIVIAL], capture_output=True, text=True, check=True)
        assert out.stdout == "2\n"

    benchmark.pedantic(once, rounds=40, warmup_rounds=3)
    _record(benchmark, "subprocess")


def test_warm_pool_round_trip(benchmark, pool):
    def once() -> None:
        assert pool.run(TRIVIAL, limits=Limits()).stdout == "2\n"

    benchmark.pedantic(once, rounds=400, warmup_rounds=20)
    _record(benchmark, "pool")


def test_bubblewrap_round_trip(benchmark):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    backend = sandbox.get_backend("bwrap")

    def once() -> None:
        assert backend.run(TRIVIAL, limits=Limits()).stdout == "2\n"

    benchmark.pedantic(once, rounds=40, warmup_rounds=3)
    backend.close()
    _record(benchmark, "bwrap")


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
    def once() -> None:
        out = subprocess.run([sys.executable, "-c", NUMPY], capture_output=True, text=True, check=True)
        assert out.stdout == "45\n"

    benchmark.pedantic(once, rounds=15, warmup_rounds=2)
    _record(benchmark, "numpy_cold")


def test_numpy_snippet_warm_pool(benchmark, pool):
    def once() -> None:
        assert pool.run(NUMPY, limits=Limits()).stdout == "45\n"

    benchmark.pedantic(once, rounds=200, warmup_rounds=10)
    _record(benchmark, "numpy_warm")


def test_summary():
    if "pool" not in RESULTS or "subprocess" not in RESULTS:
        pytest.skip("run the whole module to get the summary")
    lines = ["", "sandbox benchmark (same run, same machine):"]
    for name in ("subprocess", "pool", "bwrap", "numpy_cold", "numpy_warm"):
        if name in RESULTS:
            r = RESULTS[name]
            lines.append(f"  {name:<11} p50 {r['p50_ms']:8.2f} ms   p95 {r['p95_ms']:8.2f} ms   (n={r['n']:.0f})")
    speedup = RESULTS["subprocess"]["p50_ms"] / RESULTS["pool"]["p50_ms"]
    lines.append(f"  pool vs plain subprocess (p50): {speedup:.1f}x faster (target >= 10x, pool p50 <= 3 ms)")
    if "bwrap" in RESULTS:
        lines.append(f"  pool vs bubblewrap (p50): {RESULTS['bwrap']['p50_ms'] / RESULTS['pool']['p50_ms']:.1f}x")
    if "numpy_cold" in RESULTS and "numpy_warm" in RESULTS:
        ratio = RESULTS["numpy_cold"]["p50_ms"] / RESULTS["numpy_warm"]["p50_ms"]
        lines.append(f"  numpy snippet: warm pool {ratio:.1f}x faster than a cold subprocess")
    if "throughput" in RESULTS:
        lines.append(
            f"  1000 snippets / 64 callers: {RESULTS['throughput']['runs_per_s']:.0f} runs/s, 0 lost, 0 duplicated"
        )
    print("\n".join(lines))
