"""What every retrieval backend shares: the hit record, the protocol, the index metadata and
the errors that tell a user how to fix a missing or broken index.

Backends (``bm25``, ``dense``, ``remote``) all answer ``search(queries, k)`` with one list
of :class:`SearchHit` per query, best first, so the tool, the server and the benchmarks can
swap them by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from coa_envs.errors import UserError
from coa_envs.retrieval.corpus import Passage

__all__ = [
    "INDEX_META_FILE",
    "RetrievalError",
    "RetrievalIndexError",
    "Retriever",
    "RetrieverBadResponse",
    "RetrieverUnavailable",
    "SearchHit",
    "build_hint",
    "open_index",
    "read_index_meta",
    "write_index_meta",
]

INDEX_META_FILE = "coa_index.json"
INDEX_FORMAT_VERSION = 1


class RetrievalError(RuntimeError):
    """Base class for retrieval failures that a caller may want to tell apart."""


class RetrievalIndexError(UserError, RetrievalError):
    """An index directory is missing, incomplete or unreadable; the message says how to build it."""


class RetrieverUnavailable(RetrievalError):
    """A remote retriever did not answer in time, could not be reached, or kept answering with a
    transient error (429/5xx) after every configured retry: the tool reports ``tool_timeout``."""


class RetrieverBadResponse(RetrievalError):
    """A remote retriever answered, but not with the Search-R1 API (wrong URL, 4xx, malformed
    json): retrying cannot help, and the tool reports ``tool_error``."""


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One retrieved passage with its backend score (higher is better)."""

    passage: Passage
    score: float

    def to_wire(self) -> dict[str, Any]:
        """Search-R1 ``return_scores=True`` element: ``{"document": row, "score": s}``."""
        return {"document": self.passage.to_row(), "score": self.score}


@runtime_checkable
class Retriever(Protocol):
    """A passage retriever. Implementations must be safe to call from several threads."""

    backend: str

    def search(self, queries: list[str], k: int = 3) -> list[list[SearchHit]]: ...

    def close(self) -> None: ...


def build_hint(backend: str, index_dir: str | Path, corpus: str | Path | None = None) -> str:
    """The command that (re)builds an index, quoted in every index error."""
    corpus_arg = str(corpus) if corpus else "CORPUS.jsonl"
    return f"coa retriever build-index --backend {backend} --corpus {corpus_arg} --index {index_dir}"


@contextlib.contextmanager
def staged_index(index_dir: Path, backend: str, corpus_path: Path, num_docs: int, **meta: Any) -> Iterator[Path]:
    """Yield a staging directory beside ``index_dir``; on success write the metadata there
    (which corpus, its size, the backend's own ``meta``) and swap it in with one rename, so
    a reader never sees a half-written index and a crashed build leaves the previous index
    (if any) untouched."""
    meta = {"backend": backend, "corpus_path": str(corpus_path), "corpus_bytes": corpus_path.stat().st_size,
            "num_docs": num_docs, **meta}
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{index_dir.name}.", dir=index_dir.parent))
    try:
        yield staging
        write_index_meta(staging, meta)
        if index_dir.exists():
            shutil.rmtree(index_dir)
        os.replace(staging, index_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_index_meta(index_dir: Path, meta: dict[str, Any]) -> None:
    meta = {"format_version": INDEX_FORMAT_VERSION, **meta}
    (index_dir / INDEX_META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")


def read_index_meta(index_dir: str | Path, backend: str) -> dict[str, Any]:
    """Read and sanity-check an index's metadata, raising :class:`RetrievalIndexError` with a fix."""
    index_dir = Path(index_dir)
    meta_path = index_dir / INDEX_META_FILE
    if not index_dir.is_dir():
        raise RetrievalIndexError(
            f"{backend} index not found at {index_dir}. Build it with: {build_hint(backend, index_dir)}"
        )
    if not meta_path.is_file():
        raise RetrievalIndexError(
            f"{index_dir} is not a complete {backend} index ({INDEX_META_FILE} is missing; "
            f"an interrupted build?). Rebuild it with: {build_hint(backend, index_dir)}"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RetrievalIndexError(
            f"{meta_path} is corrupt ({exc}). Rebuild it with: {build_hint(backend, index_dir)}"
        ) from exc
    if meta.get("backend") != backend:
        raise RetrievalIndexError(
            f"{index_dir} holds a {meta.get('backend')!r} index, not a {backend!r} one. "
            f"Build a {backend} index with: {build_hint(backend, index_dir)}"
        )
    if meta.get("format_version") != INDEX_FORMAT_VERSION:
        raise RetrievalIndexError(
            f"{index_dir} was built by an incompatible version (format "
            f"{meta.get('format_version')}). Rebuild it with: {build_hint(backend, index_dir)}"
        )
    return meta


def open_index(index_dir: str | Path, backend: str,
               corpus_path: str | Path | None = None) -> tuple[dict[str, Any], Path, str]:
    """An index's checked metadata, its corpus (``corpus_path``, else the file it was built
    from) and the command that rebuilds it. A corpus that is gone, or whose size changed since
    the build (the stored offsets would point into other text), is a :class:`RetrievalIndexError`."""
    meta = read_index_meta(index_dir, backend)
    corpus = Path(corpus_path) if corpus_path else Path(meta["corpus_path"])
    hint = build_hint(backend, index_dir, corpus)
    if not corpus.is_file():
        raise RetrievalIndexError(
            f"the corpus this index was built from is gone: {corpus}. Pass corpus=... "
            f"(--corpus) with its new location, or rebuild: {hint}"
        )
    if corpus.stat().st_size != meta.get("corpus_bytes"):
        raise RetrievalIndexError(
            f"{corpus} changed since the index was built (size differs). Rebuild: {hint} --overwrite"
        )
    return meta, corpus, hint
