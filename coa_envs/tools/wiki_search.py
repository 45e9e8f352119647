"""The ``wiki_search`` tool: top-k passages from a local or remote passage retriever.

Backends: ``bm25`` (bm25s index), ``dense`` (MiniLM/e5 + faiss), ``remote`` (Search-R1 HTTP
API, e.g. ``coa retriever serve``). Which index a local backend searches, first match wins:
the ``index`` option; the task's ``metadata["wiki_index"]`` (tasks that bring their own
corpus, such as SynthHop); the ``COA_WIKI_INDEX`` environment variable. With none of these
the tool answers every call with a ``not_configured`` observation that says how to build
and pass an index -- the env keeps working, the model is told why search is unavailable.

Never raises on bad input: empty, over-long, non-ASCII and no-match queries each give a
clear observation; a retriever that is down or slow gives ``tool_timeout`` (after the
configured ``retries`` with exponential ``backoff_s``), one that answers garbage ``tool_error``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from coa_envs import retrieval
from coa_envs.options import Option, Schema
from coa_envs.retrieval import Retriever, SearchHit, open_retriever
from coa_envs.types import ErrorKind, ToolContext, ToolResult, ToolSpec

__all__ = ["BACKENDS", "SPEC", "WikiSearchTool", "build", "option_schema", "render_hits"]

SPEC = ToolSpec(name="wiki_search", usage="query", summary="retrieve the most relevant encyclopedia passages.",
                argument="the encyclopedia search query", retrieves=True)

BACKENDS: tuple[str, ...] = retrieval.BACKENDS
INDEX_ENV_VAR = "COA_WIKI_INDEX"

_LOCAL_OPTIONS = {"index", "corpus", "scorer", "mmap"}
_DENSE_OPTIONS = {"index", "corpus", "model", "device", "mmap", "torch_threads"}
_REMOTE_OPTIONS = {
    "url",
    "timeout_s",
    "connect_timeout_s",
    "retries",
    "backoff_s",
    "max_backoff_s",
    "headers",
}
_BACKEND_OPTIONS = {"bm25": _LOCAL_OPTIONS, "dense": _DENSE_OPTIONS, "remote": _REMOTE_OPTIONS}


def render_hits(hits: list[SearchHit], max_passage_chars: int) -> str:
    """Number the passages and put each title on its own line, as the model should quote them."""
    blocks = []
    for rank, hit in enumerate(hits, start=1):
        text = hit.passage.text
        if len(text) > max_passage_chars:
            text = text[:max_passage_chars].rstrip() + " ..."
        title = hit.passage.title or "(untitled)"
        blocks.append(f"Doc {rank} (Title: {title})\n{text}")
    return "\n\n".join(blocks)


class WikiSearchTool:
    """Tool protocol implementation; safe to share between threads (no per-call state)."""

    name = "wiki_search"

    def __init__(
        self,
        backend: str = "bm25",
        *,
        top_k: int = 3,
        max_query_chars: int = 1000,
        max_passage_chars: int = 2000,
        **options: Any,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"wiki_search: unknown backend {backend!r}; choose one of {BACKENDS}")
        unknown = set(options) - _BACKEND_OPTIONS[backend]
        if unknown:
            raise TypeError(
                f"wiki_search[{backend}]: unknown options {sorted(unknown)} "
                f"(known: top_k, max_query_chars, max_passage_chars, "
                f"{', '.join(sorted(_BACKEND_OPTIONS[backend]))})"
            )
        if top_k < 1 or max_query_chars < 1 or max_passage_chars < 1:
            raise ValueError(
                "wiki_search: top_k, max_query_chars and max_passage_chars must be >= 1"
            )
        self.backend = backend
        self.top_k = int(top_k)
        self.max_query_chars = int(max_query_chars)
        self.max_passage_chars = int(max_passage_chars)
        self._options = dict(options)
        self._remote: Retriever | None = None
        if backend == "remote":
            self._remote = open_retriever("remote", **self._options)
        elif self._options.get("index"):
            # A path the user named must exist: fail at make time, with the build command.
            open_retriever(backend, **self._options)

    # -- pickling: rebuild from config (retrievers hold file descriptors and sockets) --
    def __getstate__(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "top_k": self.top_k,
            "max_query_chars": self.max_query_chars,
            "max_passage_chars": self.max_passage_chars,
            "options": self._options,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(
            state["backend"],
            top_k=state["top_k"],  # type: ignore[misc]
            max_query_chars=state["max_query_chars"],
            max_passage_chars=state["max_passage_chars"],
            **state["options"],
        )

    def _retriever(self, ctx: ToolContext | None) -> Retriever | None:
        if self._remote is not None:
            return self._remote
        index = self._options.get("index")
        options = {k: v for k, v in self._options.items() if k != "index"}
        if not index and ctx is not None and ctx.task is not None:
            index = ctx.task.metadata.get("wiki_index")
            if index and not options.get("corpus"):
                options["corpus"] = ctx.task.metadata.get("wiki_corpus")
        index = index or os.environ.get(INDEX_ENV_VAR)
        if not index:
            return None
        return open_retriever(self.backend, index=str(Path(index).expanduser()), **options)

    def run(self, query: str, ctx: ToolContext | None = None) -> ToolResult:
        query = " ".join((query or "").split())
        if not query:
            return ToolResult.failure(
                "wiki_search needs a non-empty query, e.g. <wiki_search>capital of France</wiki_search>.",
                ErrorKind.BAD_ACTION,
                backend=self.backend,
            )
        note = ""
        if len(query) > self.max_query_chars:
            note = (
                f"(Your query was {len(query)} characters; only the first "
                f"{self.max_query_chars} were searched. Short keyword queries work best.)\n\n"
            )
            query = query[: self.max_query_chars]
        try:
            retriever = self._retriever(ctx)
            if retriever is None:
                return ToolResult.failure(
                    "wiki_search is not configured: no passage index was given for this environment. "
                    "Answer from your own knowledge, or ask the operator to build one ("
                    f"`{retrieval.build_hint(self.backend, 'INDEX_DIR')}`) and pass it as "
                    f"tools={{'wiki_search': {{'backend': '{self.backend}', 'index': 'INDEX_DIR'}}}} "
                    f"or set {INDEX_ENV_VAR}.",
                    ErrorKind.NOT_CONFIGURED,
                    backend=self.backend,
                )
            hits = retriever.search([query], k=self.top_k)[0]
        except retrieval.RetrieverUnavailable as exc:
            return ToolResult.failure(
                f"wiki_search timed out: the retrieval server did not answer ({exc}). "
                "Try again later or answer with what you know.",
                ErrorKind.TOOL_TIMEOUT,
                backend=self.backend,
            )
        except retrieval.RetrieverBadResponse as exc:
            return ToolResult.failure(
                f"wiki_search failed: the retrieval server gave an unusable answer ({exc}).",
                ErrorKind.TOOL_ERROR,
                backend=self.backend,
            )
        except (retrieval.RetrievalIndexError, retrieval.CorpusError) as exc:
            return ToolResult.failure(
                f"wiki_search is unavailable: {exc}", ErrorKind.NOT_CONFIGURED, backend=self.backend
            )
        except Exception as exc:  # a tool never raises into the env
            return ToolResult.failure(
                f"wiki_search failed: {type(exc).__name__}: {exc}",
                ErrorKind.TOOL_ERROR,
                backend=self.backend,
            )
        details: dict[str, Any] = {
            "backend": self.backend,
            "query": query,
            "hits": [
                {"id": h.passage.doc_id, "title": h.passage.title, "score": h.score} for h in hits
            ],
        }
        if not hits:
            text = (
                f'No passages matched "{query[:200]}". Try other keywords, e.g. the full name '
                "of the entity you are looking for."
            )
            return ToolResult(text=note + text, details={**details, "no_match": True})
        return ToolResult(text=note + render_hits(hits, self.max_passage_chars), details=details)

    def close(self) -> None:
        """Release the HTTP client; shared local indexes stay open for other envs."""
        if self._remote is not None:
            self._remote.close()


def option_schema(backend: str) -> Schema:
    """The tool's own options plus its backend's (the retriever constructor's keyword
    parameters; a local index's ``index`` and ``corpus`` directory/file), checked at make time."""
    where = "tools.wiki_search"
    own = Schema.of_callable(where, WikiSearchTool.__init__, skip=("backend",),
                             minimums={"top_k": 1, "max_query_chars": 1, "max_passage_chars": 1})
    if backend == "remote":
        from coa_envs.retrieval.remote import RemoteRetriever

        retriever = Schema.of_callable(where, RemoteRetriever.__init__, minimums={"retries": 0, "timeout_s": 0})
    else:
        if backend == "dense":
            from coa_envs.retrieval.dense import DenseRetriever as Local
        else:
            from coa_envs.retrieval.bm25 import BM25Retriever as Local
        retriever = Schema.of_callable(where, Local.__init__, skip=("index_dir", "corpus_path")).merged(
            Schema(where, {"index": Option(str | None), "corpus": Option(str | None)}))
    return Schema(where, own.options).merged(retriever)


def build(backend: str = "bm25", **config: Any) -> WikiSearchTool:
    """Registry hook: ``build("bm25", index=..., top_k=3)``, ``build("remote", url=...)``."""
    return WikiSearchTool(backend, **config)
