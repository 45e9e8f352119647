"""Record/replay cache: modes, keys, strict misses, transient results, concurrency, export."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coa_envs.tools import build_tool
from coa_envs.tools.cache import CachedTool, ToolCache, cache_key, normalise_query, options_fingerprint
from coa_envs.types import ErrorKind, Task, ToolContext, ToolResult

CTX = ToolContext()


class CountingTool:
    """A deterministic tool that counts its live calls (the thing the cache must avoid)."""

    name = "web_search"

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        with self._lock:
            self.calls += 1
        if query.startswith("timeout"):
            return ToolResult.failure("timed out", ErrorKind.TOOL_TIMEOUT)
        if query.startswith("flaky"):
            return ToolResult.failure("HTTP 503", ErrorKind.TOOL_ERROR, transient=True)
        if query.startswith("blocked"):
            return ToolResult.failure("refused", ErrorKind.BLOCKED_URL)
        return ToolResult(f"answer to {query}", details={"n": len(query)})


def test_normalisation_collapses_whitespace_but_keeps_case() -> None:
    assert normalise_query("  who\tfounded \n  it ") == "who founded it"
    assert normalise_query("Cafe\u0301") == "Café"  # NFC
    assert cache_key("t", "b", "a  b") == cache_key("t", "b", " a b ")
    assert cache_key("t", "b", "Apple") != cache_key("t", "b", "apple")
    assert cache_key("t", "b", "q") != cache_key("t", "other", "q") != cache_key("u", "b", "q")


def test_record_then_replay_without_calling_the_tool(tmp_path) -> None:
    db = tmp_path / "cache.sqlite"
    recorder = CachedTool(CountingTool(), backend="local", mode="record", path=db)
    first = recorder.run("mars moons", CTX)
    assert first.text == "answer to mars moons" and recorder.tool.calls == 1
    recorder.run("mars moons", CTX)  # record mode always calls and overwrites
    assert recorder.tool.calls == 2
    recorder.close()

    live = CountingTool()
    replayer = CachedTool(live, backend="local", mode="replay", path=db)
    hit = replayer.run("  mars   moons ", CTX)
    assert live.calls == 0
    assert hit.ok and hit.text == "answer to mars moons"
    assert hit.details["cache"] == "hit" and hit.details["n"] == len("mars moons")
    assert replayer.name == "web_search"
    replayer.close()


def test_strict_replay_miss_is_a_clear_failure_and_lenient_miss_calls_live(tmp_path) -> None:
    db = tmp_path / "cache.sqlite"
    live = CountingTool()
    strict = CachedTool(live, backend="local", mode="replay", path=db)
    miss = strict.run("unseen query", CTX)
    assert not miss.ok and miss.error_kind == ErrorKind.CACHE_MISS
    assert "No recorded result" in miss.text and str(db) in miss.text
    assert live.calls == 0
    lenient = CachedTool(live, backend="local", mode="replay", path=db, strict=False)
    assert lenient.run("unseen query", CTX).text == "answer to unseen query"
    assert live.calls == 1
    assert strict.run("unseen query", CTX).error_kind == ErrorKind.CACHE_MISS  # lenient misses are not stored


def test_replay_or_record_and_off(tmp_path) -> None:
    live = CountingTool()
    tool = CachedTool(live, backend="local", mode="replay-or-record", path=tmp_path / "c.sqlite")
    for _ in range(3):
        tool.run("q", CTX)
    assert live.calls == 1
    off = CachedTool(live, backend="local", mode="off", path=tmp_path / "unused.sqlite")
    off.run("q", CTX)
    off.run("q", CTX)
    assert live.calls == 3 and not (tmp_path / "unused.sqlite").exists()
    with pytest.raises(ValueError, match="cache mode"):
        CachedTool(live, mode="sometimes")


def test_transient_failures_are_not_stored_but_deterministic_ones_are(tmp_path) -> None:
    live = CountingTool()
    tool = CachedTool(live, backend="x", mode="replay-or-record", path=tmp_path / "c.sqlite")
    for query in ("timeout 1", "flaky 1", "blocked 1"):
        tool.run(query, CTX)
        tool.run(query, CTX)
    assert live.calls == 2 + 2 + 1
    replay = tool.run("blocked 1", CTX)
    assert replay.error_kind == ErrorKind.BLOCKED_URL and not replay.ok


def test_context_dependent_tools_are_keyed_by_their_context(tmp_path) -> None:
    class PerTaskTool(CountingTool):
        name = "visual_inspector"

        def cache_context(self, ctx: ToolContext) -> str:
            return ctx.task.task_id if ctx.task else ""

        def run(self, query: str, ctx: ToolContext) -> ToolResult:
            super().run(query, ctx)
            return ToolResult(f"{ctx.task.task_id}:{query}")

    tool = CachedTool(PerTaskTool(), backend="files", mode="replay-or-record", path=tmp_path / "c.sqlite")
    a = tool.run("data.xlsx", ToolContext(task=Task("task-a", "q")))
    b = tool.run("data.xlsx", ToolContext(task=Task("task-b", "q")))
    assert (a.text, b.text) == ("task-a:data.xlsx", "task-b:data.xlsx")


def test_many_threads_share_one_store(tmp_path) -> None:
    live = CountingTool()
    tool = CachedTool(live, backend="x", mode="replay-or-record", path=tmp_path / "c.sqlite")
    queries = [f"query {i % 40}" for i in range(400)]
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda q: tool.run(q, CTX), queries))
    assert all(r.text == f"answer to {q}" for r, q in zip(results, queries, strict=True))
    assert len(tool.store) == 40
    assert live.calls < 400  # most calls were served from the store
    tool.close()


_WRITER = textwrap.dedent("""
    import sys
    from coa_envs.tools.cache import CachedTool
    from coa_envs.types import ToolContext, ToolResult

    class Echo:
        name = "web_search"
        def run(self, query, ctx):
            return ToolResult("echo " + query)

    worker, db = sys.argv[1], sys.argv[2]
    tool = CachedTool(Echo(), backend="local", mode="replay-or-record", path=db)
    for i in range(150):
        tool.run(f"private {worker} {i}", ToolContext())
        tool.run(f"shared {i}", ToolContext())
    tool.close()
""")


def test_concurrent_writer_processes(tmp_path) -> None:
    db = tmp_path / "shared.sqlite"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(w), str(db)], stderr=subprocess.PIPE)
             for w in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    store = ToolCache(db)
    assert len(store) == 4 * 150 + 150
    journal = store._conn().execute("PRAGMA journal_mode").fetchone()[0]
    assert journal == "wal"
    store.close()


def test_export_and_import_jsonl(tmp_path) -> None:
    tool = CachedTool(CountingTool(), backend="local", mode="record", path=tmp_path / "a.sqlite")
    for query in ("alpha", "beta", "blocked x"):
        tool.run(query, CTX)
    out = tmp_path / "cache.jsonl"
    assert tool.store.export_jsonl(out) == 3
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert {r["query"] for r in rows} == {"alpha", "beta", "blocked x"}
    assert {"key", "tool", "backend", "text", "ok", "error_kind", "details"} <= set(rows[0])

    fresh = CachedTool(CountingTool(), backend="local", mode="replay", path=tmp_path / "b.sqlite")
    assert fresh.store.import_jsonl(out) == 3
    assert fresh.run("beta", CTX).text == "answer to beta"
    assert fresh.run("blocked x", CTX).error_kind == ErrorKind.BLOCKED_URL
    assert fresh.tool.calls == 0


def test_build_tool_wraps_a_configured_tool(tmp_path) -> None:
    pages = tmp_path / "pages.jsonl"
    pages.write_text(json.dumps({"url": "http://127.0.0.1/x", "title": "Xenon", "text": "Xenon is a gas."}) + "\n")
    db = tmp_path / "c.sqlite"
    config = {"backend": "local", "path": str(pages), "cache": {"mode": "record", "path": str(db)}}
    recorded = build_tool("web_search", config).run("xenon gas", CTX)
    pages.unlink()  # replay must not need the collection any more
    replayed = build_tool("web_search", {**config, "cache": {"mode": "replay", "path": str(db)}})
    assert isinstance(replayed, CachedTool)
    assert replayed.run("xenon  gas", CTX).text == recorded.text
    assert replayed.run("argon", CTX).error_kind == ErrorKind.CACHE_MISS


def test_answer_shaping_options_are_part_of_the_key_and_transport_options_are_not(tmp_path) -> None:
    db = tmp_path / "c.sqlite"
    assert options_fingerprint({"timeout_s": 5, "api_key": "k", "path": "/x"}) == ""
    machine_specific = {"executable_path": "/usr/bin/chromium", "chromedriver_path": "/x", "verify_tls": "/ca.pem",
                        "headers": {"Authorization": "Bearer t"}, "device": "cuda", "browser_workers": 4}
    assert options_fingerprint(machine_specific) == ""
    nested = {"summary": {"model": "m", "api_key": "secret", "base_url": "http://a"}}
    assert options_fingerprint(nested) == options_fingerprint({"summary": {"model": "m"}}) != ""
    assert cache_key("t", "b", "q", "", options_fingerprint({})) == cache_key("t", "b", "q")  # old keys still hit
    recorder = CachedTool(CountingTool(), backend="serper", mode="record", path=db, options={"top_k": 3})
    recorder.run("capital of peru", CTX)
    same = CachedTool(CountingTool(), backend="serper", mode="replay", path=db,
                      options={"top_k": 3, "timeout_s": 30, "api_key": "other", "path": "/elsewhere"})
    assert same.run("capital of peru", CTX).ok and same.tool.calls == 0
    wider = CachedTool(CountingTool(), backend="serper", mode="replay", path=db, options={"top_k": 10})
    assert wider.run("capital of peru", CTX).error_kind == ErrorKind.CACHE_MISS


def test_build_tool_keys_replays_by_the_tool_options(tmp_path) -> None:
    pages = tmp_path / "pages.jsonl"
    pages.write_text(json.dumps({"url": "http://127.0.0.1/x", "title": "Xenon", "text": "Xenon is a gas."}) + "\n")
    db = tmp_path / "c.sqlite"
    base = {"backend": "local", "path": str(pages)}
    build_tool("web_search", {**base, "top_k": 1, "cache": {"mode": "record", "path": str(db)}}).run("xenon", CTX)
    replay = {"mode": "replay", "path": str(db)}
    assert build_tool("web_search", {**base, "top_k": 1, "cache": replay}).run("xenon", CTX).ok
    assert build_tool("web_search", {**base, "top_k": 5, "cache": replay}).run("xenon", CTX).error_kind == (
        ErrorKind.CACHE_MISS)


def test_closing_closes_the_wrapped_tool(tmp_path) -> None:
    class Closable(CountingTool):
        closed = False

        def close(self) -> None:
            self.closed = True

    inner = Closable()
    CachedTool(inner, mode="replay", path=Path(tmp_path) / "c.sqlite").close()
    assert inner.closed


def test_coa_cache_cli_exports_imports_and_counts(tmp_path) -> None:
    from typer.testing import CliRunner

    from coa_cli.main import app

    tool = CachedTool(CountingTool(), backend="local", mode="record", path=tmp_path / "a.sqlite")
    for query in ("alpha", "blocked x"):
        tool.run(query, CTX)
    tool.close()
    runner = CliRunner()
    exported = runner.invoke(app, ["cache", "export", str(tmp_path / "a.sqlite"), str(tmp_path / "a.jsonl")])
    assert exported.exit_code == 0 and "exported 2 entries" in exported.output
    imported = runner.invoke(app, ["cache", "import", str(tmp_path / "a.jsonl"), str(tmp_path / "b.sqlite")])
    assert imported.exit_code == 0 and "imported 2 entries" in imported.output
    stats = runner.invoke(app, ["cache", "stats", str(tmp_path / "b.sqlite")])
    assert "web_search[local]: 2 entries (1 failures)" in stats.output
    missing = runner.invoke(app, ["cache", "stats", str(tmp_path / "nope.sqlite")])
    assert missing.exit_code != 0 and "does not exist" in missing.output


def test_wiki_search_episodes_replay_through_gym_make(tmp_path) -> None:
    """The cache is generic: a SynthHop env's wiki_search records and replays the same way."""
    import gymnasium as gym

    import coa_envs  # noqa: F401

    db = tmp_path / "wiki.sqlite"

    def play(mode: str) -> tuple[list[str], object]:
        env = gym.make("coa/SynthHop-v0", task_options={"num_tasks": 6},
                       tools={"wiki_search": {"cache": {"mode": mode, "path": str(db)}}})
        try:
            observations = []
            for task in env.unwrapped.tasks:
                env.reset(options={"task_id": task.task_id})
                for action in task.metadata["oracle_actions"]:
                    observation, reward, terminated, _, info = env.step(action)
                    observations.append((observation, reward, terminated, info["error_kind"]))
            tool = env.unwrapped.tools["wiki_search"]
            env.reset(seed=0)
            miss = env.step(f"<wiki_search>a query only the {mode} run asks</wiki_search>")[4]["error_kind"]
            return observations, (type(tool).__name__, miss)
        finally:
            env.close()

    recorded, (kind, _) = play("record")
    assert kind == "CachedTool" and len(ToolCache(db)) >= 6
    replayed, (_, miss) = play("replay")
    assert replayed == recorded and miss == ErrorKind.CACHE_MISS
    finals = [reward for _, reward, terminated, _ in recorded if terminated]
    assert len(finals) == 6 and set(finals) == {1.0}  # every oracle episode solved, live and replayed
