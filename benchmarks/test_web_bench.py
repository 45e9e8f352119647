"""Web family performance, each figure next to a baseline measured in the same run.

- Cached replay latency per tool call (target <= 1 ms p50) for ``web_search`` (local BM25),
  ``crawl_page`` (httpx on the mini-web) and ``visual_inspector`` (a spreadsheet attachment),
  each vs the live call it replaces.
- Crawl+extract throughput on the mini-web: Playwright and Selenium pages/s as a ratio of httpx
  on the same pages, plus bare Playwright (no SSRF proxy, no extraction) to show what the guard
  and extraction cost (``browser`` marker; skipped with a reason without Chromium).
- 32 concurrent ``coa/MiniWeb-v0`` episodes (oracle scripts through ``env.step`` with the real
  search and crawl tools) must all finish with reward 1 and no tool error; wall time vs the same
  32 episodes played one after another.

Run: ``python3 -m pytest -q benchmarks/test_web_bench.py -s`` (figures are printed and stored in
pytest-benchmark's ``extra_info``). Nothing here asserts on time.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from coa_envs.miniweb import HUGE_PAGE_PATH, serve
from coa_envs.tasks.miniweb import make_kwargs
from coa_envs.tools.cache import CachedTool
from coa_envs.tools.crawl_page import build as build_crawl
from coa_envs.tools.visual_inspector import build as build_inspector
from coa_envs.tools.web_search import build as build_search
from coa_envs.types import Task, ToolContext
from coa_envs.web.browsers import find_chromedriver, find_chromium

CTX = ToolContext()
WORDS = [
    "orbit", "comet", "nebula", "quasar", "pulsar", "galaxy", "planet", "asteroid", "meteor", "crater",
    "lunar", "solar", "stellar", "eclipse", "zenith", "aurora", "photon", "plasma", "magnet", "gravity",
]


@pytest.fixture(scope="module")
def web():
    with serve(0, slow_delay_s=0.2) as server:
        yield server


def _html_pages(web) -> list[str]:
    """Every ordinary HTML page of the mini-web (no redirect, delay or the 1.2 MB page)."""
    return [web.url(p.path) for p in web.site.pages.values()
            if p.status == 200 and p.content_type.startswith("text/html") and not p.delay_s
            and p.path != HUGE_PAGE_PATH]


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "pages.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(2000):
            words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(60))
            handle.write(json.dumps({"url": f"http://127.0.0.1/p/{i}", "title": f"Page {i} {WORDS[i % 20]}",
                                     "text": f"Document {i}. {words}."}) + "\n")
    return path


@pytest.fixture(scope="module")
def spreadsheet_ctx(tmp_path_factory) -> ToolContext:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.append(["region", "quarter", "units"])
    for row in range(300):
        sheet.append([f"region-{row % 12}", f"Q{row % 4 + 1}", row * 3])
    path = tmp_path_factory.mktemp("attach") / "sales.xlsx"
    book.save(path)
    return ToolContext(task=Task(task_id="bench", question="total units?", files=(str(path),)))


def _p50_ms(fn: Callable[[str], object], calls: list[str]) -> float:
    samples = []
    for query in calls:
        started = time.perf_counter()
        fn(query)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def _tool_and_calls(name: str, collection, web, spreadsheet_ctx):
    if name == "web_search":
        tool = build_search("local", path=str(collection), top_k=5)
        return tool, [f"{WORDS[i % 20]} {WORDS[(i * 3) % 20]} {i}" for i in range(200)], CTX
    if name == "crawl_page":
        tool = build_crawl("httpx", allow_hosts=[f"127.0.0.1:{web.port}"], resolve_dns=False)
        return tool, _html_pages(web) * 3, CTX
    tool = build_inspector("files")
    return tool, [f"sales.xlsx | units of region-{i % 12}" for i in range(60)], spreadsheet_ctx


@pytest.mark.parametrize("name", ["web_search", "crawl_page", "visual_inspector"])
def test_cached_replay_latency_per_tool(benchmark, name, collection, web, spreadsheet_ctx, tmp_path):
    live, calls, ctx = _tool_and_calls(name, collection, web, spreadsheet_ctx)
    live.run(calls[0], ctx)  # warm up: index build, first connection
    live_p50 = _p50_ms(lambda q: live.run(q, ctx), calls)

    db = tmp_path / "replay.sqlite"
    recorder = CachedTool(live, backend="bench", mode="record", path=db)
    for query in dict.fromkeys(calls):
        assert recorder.run(query, ctx).ok
    replay = CachedTool(live, backend="bench", mode="replay", path=db)
    cycle = iter(range(10**9))

    def one_replay():
        result = replay.run(calls[next(cycle) % len(calls)], ctx)
        assert result.ok and result.details["cache"] == "hit"
        return result

    benchmark(one_replay)
    replay_p50 = benchmark.stats.stats.median * 1000
    benchmark.extra_info.update(replay_p50_ms=round(replay_p50, 4), live_p50_ms=round(live_p50, 3),
                                live_over_replay=round(live_p50 / replay_p50, 1))
    print(f"\n{name}: cached replay p50 {replay_p50 * 1000:.1f} us (target <= 1 ms); live call p50 "
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


def _raw_playwright_rate(urls: list[str]) -> float:
    """Bare Playwright (goto + content, no guard proxy, no extraction): the browser's own floor."""
    from playwright.sync_api import sync_playwright

    from coa_envs.web.browsers import _CHROMIUM_FLAGS

    flags = [f for f in _CHROMIUM_FLAGS if not f.startswith("--proxy")]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(), args=flags)
        try:
            page = browser.new_page()
            page.goto(urls[0])
            started = time.perf_counter()
            for url in urls:
                page.goto(url, wait_until="load")
                page.content()
            return len(urls) / (time.perf_counter() - started)
        finally:
            browser.close()


@pytest.mark.browser
def test_miniweb_crawl_throughput_httpx_vs_browsers(benchmark, web):
    urls = _html_pages(web)
    allow = [f"127.0.0.1:{web.port}"]
    httpx_tool = build_crawl("httpx", allow_hosts=allow, resolve_dns=False)
    rates = {"httpx": _pages_per_second(httpx_tool, urls)}
    if find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    engines = ["playwright"] + (["selenium"] if find_chromedriver() else [])
    for engine in engines:
        tool = build_crawl(engine, allow_hosts=allow, resolve_dns=False, settle_ms=0)
        try:
            rates[engine] = _pages_per_second(tool, urls)
        finally:
            tool.close()
    rates["bare-playwright"] = _raw_playwright_rate(urls)
    benchmark.pedantic(httpx_tool.run, args=(urls[0], CTX), rounds=20, iterations=1)
    httpx_tool.close()
    benchmark.extra_info.update({f"{name}_pages_per_s": round(rate, 1) for name, rate in rates.items()})
    benchmark.extra_info.update({f"{name}_vs_httpx": round(rate / rates["httpx"], 3) for name, rate in rates.items()})
    guard_cost = rates["bare-playwright"] / rates["playwright"]
    benchmark.extra_info["playwright_guard_and_extract_overhead"] = round(guard_cost, 3)
    print(f"\ncrawl+extract throughput on {len(urls)} mini-web pages (pages/s, ratio vs httpx); "
          f"'bare-playwright' = goto+content without the SSRF proxy or extraction "
          f"(our Playwright backend takes x{guard_cost:.2f} its time):")
    for name, rate in rates.items():
        print(f"  {name:<16} {rate:7.1f} pages/s ({1000 / rate:6.1f} ms/page)  x{rate / rates['httpx']:.3f}")


def _play(env) -> tuple[float, list[str]]:
    """One oracle episode; returns the reward and every tool error seen on the way."""
    task = env.unwrapped.task
    errors = []
    reward = 0.0
    for action in task.metadata["oracle_actions"]:
        _, reward, terminated, _, info = env.step(action)
        if not terminated and info["error_kind"] is not None:
            errors.append(f"{task.task_id}: {info['error_kind']}")
    return float(reward), errors


def test_32_concurrent_miniweb_episodes_without_errors(benchmark, web):
    envs = [gym.make("coa/MiniWeb-v0", **make_kwargs(web)) for _ in range(32)]
    try:
        task_ids = [t.task_id for t in envs[0].unwrapped.tasks]

        def episode(index: int) -> tuple[float, list[str]]:
            env = envs[index]
            env.reset(options={"task_id": task_ids[index % len(task_ids)]})
            return _play(env)

        warm = [episode(i) for i in range(32)]  # untimed: shared index build, first connections
        started = time.perf_counter()
        sequential = [episode(i) for i in range(32)]
        sequential_s = time.perf_counter() - started

        def burst() -> list[tuple[float, list[str]]]:
            with ThreadPoolExecutor(32) as pool:
                return list(pool.map(episode, range(32)))

        outcomes = benchmark.pedantic(burst, rounds=3, iterations=1)
    finally:
        for env in envs:
            env.close()
    for results in (warm, sequential, outcomes):
        assert [reward for reward, _ in results] == [1.0] * 32
        assert [error for _, errors in results for error in errors] == []
    concurrent_s = benchmark.stats.stats.median
    benchmark.extra_info.update(concurrent_s=round(concurrent_s, 3), sequential_s=round(sequential_s, 3),
                                speedup=round(sequential_s / concurrent_s, 2), episodes=32, errors=0)
    print(f"\n32 concurrent MiniWeb episodes ({len(task_ids)} task kinds cycled, search + crawl): "
          f"{concurrent_s:.3f} s, all reward 1, 0 tool errors; the same 32 sequentially: {sequential_s:.3f} s "
          f"(x{sequential_s / concurrent_s:.2f})")
