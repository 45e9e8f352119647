"""Record/replay cache for any tool, so that web RL is reproducible and tests run offline.

A :class:`CachedTool` wraps a Tool. Its key is content-addressed: SHA-256 of the tool name,
the backend, the normalised query, the tool options that shape an answer (``top_k``,
``max_chars``, a summary model...: a replay must not serve a 3-result page to a config that
asks for 10) and (for tools whose answer depends on the episode, such as
``visual_inspector`` reading a task's attachments) the tool's ``cache_context(ctx)``.
Options that only change how a call is made (timeouts, keys, concurrency, retries) or where
a resource lives (``path``, ``index``, ``url``: a cache recorded on one machine must replay on
another) are left out of the key, so use one cache file per corpus. With no answer-shaping
options the key is the same as a key without options. Options are keyed as configured: an
explicit default (``top_k: 5`` where 5 is the default) keys differently from leaving it out.

Query normalisation: Unicode NFC, leading/trailing whitespace stripped and internal runs
of whitespace collapsed to one space. Case is *kept*: URLs, file names and code are
case-sensitive, and a search engine may rank ``Apple`` and ``apple`` differently.

Modes: ``off`` (pass through), ``record`` (always call the tool and store the result),
``replay`` (only stored results; an unseen query is a ``CACHE_MISS`` failure when
``strict``, otherwise a live call that is not stored) and ``replay-or-record`` (stored if
present, else call and store). Transient failures (timeouts, 5xx, "not configured", or
any result whose ``details["transient"]`` is true) are never stored: replaying them would
freeze an outage into the dataset.

Storage is one SQLite file in WAL mode with a busy timeout, one connection per thread and
per process, so many rollout threads and worker processes can record into the same file.
``export_jsonl``/``import_jsonl`` move entries to and from a reviewable JSONL file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from coa_envs.types import ErrorKind, Tool, ToolContext, ToolResult

__all__ = ["MODES", "CachedTool", "ToolCache", "cache_key", "normalise_query", "options_fingerprint"]

MODES = ("off", "record", "replay", "replay-or-record")
_NEVER_STORED = frozenset({ErrorKind.TOOL_TIMEOUT, ErrorKind.CACHE_MISS, ErrorKind.NOT_CONFIGURED})
_SCHEMA = """
CREATE TABLE IF NOT EXISTS tool_cache (
    key TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    backend TEXT NOT NULL,
    query TEXT NOT NULL,
    context TEXT NOT NULL,
    text TEXT NOT NULL,
    ok INTEGER NOT NULL,
    error_kind TEXT,
    details TEXT NOT NULL,
    latency_s REAL NOT NULL,
    recorded_at REAL NOT NULL
)
"""
_COLUMNS = ("key", "tool", "backend", "query", "context", "text", "ok", "error_kind", "details",
            "latency_s", "recorded_at")


def normalise_query(query: str) -> str:
    """NFC, trimmed, whitespace runs collapsed; case kept (see the module docstring)."""
    return " ".join(unicodedata.normalize("NFC", query).split())


#: Option names (or name endings) that change how or where a call is made, not what it returns.
_TRANSPORT_OPTIONS = ("timeout", "timeout_s", "api_key", "api_key_env", "concurrency", "max_workers",
                      "pool_size", "retries", "max_retries", "backoff_s", "max_backoff_s", "user_agent",
                      "headless", "headers", "verify_tls", "device", "mmap", "path", "index", "corpus", "url",
                      "base_url", "torch_threads", "browser_workers")
_TRANSPORT_SUFFIXES = ("_timeout_s", "_api_key", "_retries", "_path", "_workers", "_threads", "_backoff_s")


def _is_transport_option(name: str) -> bool:
    return name in _TRANSPORT_OPTIONS or name.endswith(_TRANSPORT_SUFFIXES)


def _answer_shaping(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options minus transport/location ones, at every level (``summary: {api_key: ...}``)."""
    return {k: _answer_shaping(v) if isinstance(v, Mapping) else v
            for k, v in options.items() if not _is_transport_option(k)}


def options_fingerprint(options: Mapping[str, Any] | None) -> str:
    """Canonical JSON of the answer-shaping options ('' when there are none)."""
    kept = _answer_shaping(options or {})
    return json.dumps(kept, sort_keys=True, ensure_ascii=False, default=str) if kept else ""


def cache_key(tool: str, backend: str, query: str, context: str = "", options: str = "") -> str:
    parts = [tool, backend, normalise_query(query), context]
    if options:  # appended only when present, so option-free keys stay what they always were
        parts.append(options)
    payload = json.dumps(parts, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class ToolCache:
    """The SQLite store. Safe to share between threads; each process opens its own connections."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._init_schema()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _init_schema(self) -> None:
        conn = self._connect()
        try:
            deadline = time.monotonic() + self._busy_timeout_s
            while True:  # switching to WAL needs a moment without other writers
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute(_SCHEMA)
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        finally:
            conn.close()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():  # never reuse a connection across fork
            conn = self._connect()
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._lock:
                self._connections.append(conn)
        return conn

    def get(self, key: str) -> ToolResult | None:
        row = self._conn().execute(
            "SELECT text, ok, error_kind, details, latency_s FROM tool_cache WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        text, ok, error_kind, details, latency_s = row
        replay_details = json.loads(details)
        replay_details["cache"] = "hit"
        replay_details["recorded_latency_s"] = latency_s
        return ToolResult(text=text, ok=bool(ok), error_kind=ErrorKind(error_kind) if error_kind else None,
                          details=replay_details)

    def put(self, key: str, tool: str, backend: str, query: str, context: str, result: ToolResult) -> None:
        row = (key, tool, backend, normalise_query(query), context, result.text, int(result.ok),
               str(result.error_kind) if result.error_kind else None,
               json.dumps(dict(result.details), default=str, ensure_ascii=False), float(result.latency_s),
               time.time())
        self._conn().execute(
            f"INSERT OR REPLACE INTO tool_cache ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
            row,
        )

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM tool_cache").fetchone()[0])

    def rows(self) -> Iterator[dict[str, Any]]:
        cursor = self._conn().execute(f"SELECT {', '.join(_COLUMNS)} FROM tool_cache ORDER BY recorded_at, key")
        for values in cursor:
            row = dict(zip(_COLUMNS, values, strict=True))
            row["ok"] = bool(row["ok"])
            row["details"] = json.loads(row["details"])
            yield row

    def export_jsonl(self, out_path: str | os.PathLike[str]) -> int:
        """Write every entry as one JSON object per line; return how many were written."""
        count = 0
        with open(out_path, "w", encoding="utf-8") as handle:
            for row in self.rows():
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += 1
        return count

    def import_jsonl(self, in_path: str | os.PathLike[str]) -> int:
        """Load entries written by :meth:`export_jsonl` (same keys; existing ones replaced)."""
        count = 0
        conn = self._conn()
        with open(in_path, encoding="utf-8") as handle:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for line in handle:
                    if not line.strip():
                        continue
                    row = json.loads(line)
                    row["ok"] = int(row["ok"])
                    row["details"] = json.dumps(row["details"], ensure_ascii=False)
                    conn.execute(
                        f"INSERT OR REPLACE INTO tool_cache ({', '.join(_COLUMNS)}) "
                        f"VALUES ({', '.join('?' * len(_COLUMNS))})",
                        tuple(row[c] for c in _COLUMNS),
                    )
                    count += 1
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return count

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(sqlite3.ProgrammingError):  # already closed elsewhere
                    conn.close()
            self._connections.clear()
        self._local = threading.local()


class CachedTool:
    """Wrap ``tool`` with record/replay. Same ``name`` and ``run`` contract as the tool."""

    def __init__(
        self,
        tool: Tool,
        backend: str = "",
        mode: str = "replay-or-record",
        path: str | os.PathLike[str] = "tool_cache.sqlite",
        strict: bool = True,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"cache mode {mode!r} is not valid; use one of {MODES}")
        self.tool = tool
        self.name = tool.name
        self.backend = backend
        self.mode = mode
        self.strict = strict
        self.options = options_fingerprint(options)
        self.store = ToolCache(path) if mode != "off" else None

    def _context(self, ctx: ToolContext) -> str:
        hook = getattr(self.tool, "cache_context", None)
        return str(hook(ctx)) if callable(hook) else ""

    @staticmethod
    def _storable(result: ToolResult) -> bool:
        return result.error_kind not in _NEVER_STORED and not result.details.get("transient", False)

    def _call_and_store(self, query: str, ctx: ToolContext, key: str, context: str) -> ToolResult:
        assert self.store is not None
        started = time.perf_counter()
        result = self.tool.run(query, ctx)
        if not result.latency_s:
            result = ToolResult(result.text, result.ok, result.error_kind, time.perf_counter() - started,
                                result.cost, result.details)
        if self._storable(result):
            self.store.put(key, self.name, self.backend, query, context, result)
        return result

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        if self.store is None:
            return self.tool.run(query, ctx)
        context = self._context(ctx)
        key = cache_key(self.name, self.backend, query, context, self.options)
        if self.mode == "record":
            return self._call_and_store(query, ctx, key, context)
        hit = self.store.get(key)
        if hit is not None:
            return hit
        if self.mode == "replay-or-record":
            return self._call_and_store(query, ctx, key, context)
        if self.strict:
            return ToolResult.failure(
                f"No recorded result for this {self.name} call (replay mode, cache {self.store.path}). "
                f"Record it first with cache mode 'record' or 'replay-or-record', or set strict: false.",
                ErrorKind.CACHE_MISS, query=normalise_query(query), key=key,
            )
        return self.tool.run(query, ctx)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
        closer = getattr(self.tool, "close", None)
        if callable(closer):
            closer()
