"""Web tools: cached replay latency, crawl+extract throughput per backend, 32 concurrent crawls.

Every figure is printed next to a baseline measured in the same run:
- replay p50 (target <= 1 ms) vs the live local BM25 search it replaces;
- pages/s of Playwright and Selenium as a ratio of httpx on the same loopback pages;
- 32 concurrent crawls must finish with zero errors (time vs the same crawls sequentially).
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from coa_envs.tools.cache import CachedTool
from coa_envs.tools.crawl_page import build as build_crawl
from coa_envs.tools.web_search import build as build_search
from coa_envs.types import ToolContext
from coa_envs.web.browsers import find_chromedriver, find_chromium
from coa_envs.web.testing import serve_test_site

CTX = ToolContext()
WORDS = [
    "orbit", "comet", "nebula", "quasar", "pulsar", "galaxy", "planet", "asteroid", "meteor", "crater",
    "lunar", "solar", "stellar", "eclipse", "zenith", "aurora", "photon", "plasma", "magnet", "gravity",
]


@pytest.fixture(scope="module")
def site():
    with serve_test_site() as running:
        yield running


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "pages.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(2000):
            words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(60))
            handle.write(json.dumps({"url": f"http://127.0.0.1/p/{i}", "title": f"Page {i} {WORDS[i % 20]}",
                                     "text": f"Document {i}. {words}."}) + "\n")
    return path


def _p50_ms(fn, calls: list[str]) -> float:
    samples = []
    for query in calls:
        started = time.perf_counter()
        fn(query)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def test_cached_replay_latency(benchmark, collection, tmp_path):
    queries = [f"{WORDS[i % 20]} {WORDS[(i * 3) % 20]} {i}" for i in range(200)]
    live = build_search("local", path=str(collection), top_k=5)
    live.run("warm up the index", CTX)
    live_p50 = _p50_ms(lambda q: live.run(q, CTX), queries)

    db = tmp_path / "replay.sqlite"
    recorder = CachedTool(live, backend="local", mode="record", path=db)
    for query in queries:
        recorder.run(query, CTX)
    replay = CachedTool(live, backend="local", mode="replay", path=db)
    cycle = iter(range(10**9))

    def one_replay():
        result = replay.run(queries[next(cycle) % len(queries)], CTX)
        assert result.ok
        return result

    benchmark(one_replay)
    replay_p50 = benchmark.stats.stats.median * 1000
    benchmark.extra_info.update(replay_p50_ms=round(replay_p50, 4), live_p50_ms=round(live_p50, 3))
    print(f"\ncached replay p50: {replay_p50 * 1000:.1f} us (target <= 1 ms); live local BM25 search p50: "
          f"{live_p50:.2f} ms; replay is {live_p50 / replay_p50:.0f}x faster")
    replay.close()
    recorder.close()


def _pages_per_second(tool, urls: list[str]) -> float:
    tool.run(urls[0], CTX)  # warm: browser launch and first connection are not throughput
    started = time.perf_counter()
    for url in urls:
        result = tool.run(url, CTX)
        assert result.ok, result.text
    return len(urls) / (time.perf_counter() - started)


@pytest.mark.browser
def test_crawl_throughput_httpx_vs_browsers(benchmark, site):
    urls = [site.url(f"/page/{n}") for n in range(30)]
    httpx_tool = build_crawl("httpx", allow_hosts=["127.0.0.1"], resolve_dns=False)
    rates = {"httpx": _pages_per_second(httpx_tool, urls)}
    if find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    engines = ["playwright"] + (["selenium"] if find_chromedriver() else [])
    for engine in engines:
        tool = build_crawl(engine, allow_hosts=["127.0.0.1"], resolve_dns=False, settle_ms=0)
        try:
            rates[engine] = _pages_per_second(tool, urls)
        finally:
            tool.close()
    benchmark.pedantic(httpx_tool.run, args=(urls[0], CTX), rounds=20, iterations=1)
    httpx_tool.close()
    benchmark.extra_info.update({f"{name}_pages_per_s": round(rate, 1) for name, rate in rates.items()})
    print("\ncrawl+extract throughput on loopback pages (pages/s, ratio vs httpx):")
    for name, rate in rates.items():
        print(f"  {name:<10} {rate:7.1f} pages/s  x{rate / rates['httpx']:.2f}")


def test_32_concurrent_crawls_without_errors(benchmark, site):
    tool = build_crawl("httpx", allow_hosts=["127.0.0.1"], resolve_dns=False)
    queries = [f"{site.url(f'/page/{n}')} | {site.url('/doc.pdf')}" for n in range(32)]
    started = time.perf_counter()
    sequential = [tool.run(q, CTX) for q in queries]
    sequential_s = time.perf_counter() - started

    def burst():
        with ThreadPoolExecutor(32) as pool:
            return list(pool.map(lambda q: tool.run(q, CTX), queries))

    results = benchmark.pedantic(burst, rounds=3, iterations=1)
    errors = [r.text for r in results if not r.ok or any(not p["ok"] for p in r.details["pages"])]
    assert errors == [] and all(r.ok for r in sequential)
    assert all(f"magic number of this page is {n * 7}." in r.text for n, r in enumerate(results))
    concurrent_s = benchmark.stats.stats.median
    benchmark.extra_info.update(concurrent_s=round(concurrent_s, 3), sequential_s=round(sequential_s, 3))
    print(f"\n32 concurrent crawls (2 URLs each): {concurrent_s:.3f} s, 0 errors; sequential: {sequential_s:.3f} s "
          f"(x{sequential_s / concurrent_s:.2f})")
    tool.close()
