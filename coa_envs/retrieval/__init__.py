"""Passage retrieval backends behind one ``search(queries, k)`` interface.

``bm25`` (bm25s, memory-mapped index), ``dense`` (sentence-transformers + faiss) and
``remote`` (Search-R1 HTTP API) are chosen by name with :func:`open_retriever`; local
indexes are opened once per process and shared, because many envs of a vectorised rollout
point at the same index. Heavy libraries are imported only by the backend that needs them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from coa_envs.retrieval.base import (
    RetrievalError,
    RetrievalIndexError,
    Retriever,
    RetrieverBadResponse,
    RetrieverUnavailable,
    SearchHit,
    build_hint,
)
from coa_envs.retrieval.corpus import (
    CorpusError,
    Passage,
    iter_corpus,
    passage_from_row,
    write_corpus,
)

__all__ = [
    "BACKENDS", "CorpusError", "Passage", "RetrievalError", "RetrievalIndexError", "Retriever",
    "RetrieverBadResponse", "RetrieverUnavailable", "SearchHit", "build_hint", "build_index",
    "iter_corpus", "open_retriever", "passage_from_row", "write_corpus"
]

BACKENDS = ("bm25", "dense", "remote")

_shared: dict[tuple[Any, ...], Retriever] = {}
_shared_lock = threading.Lock()


def build_index(backend: str, corpus: str | Path, index: str | Path, **options: Any) -> Path:
    """Build a local index (``bm25`` or ``dense``) for a jsonl corpus; returns the index dir."""
    if backend == "bm25":
        from coa_envs.retrieval.bm25 import build_bm25_index

        return build_bm25_index(corpus, index, **options)
    if backend == "dense":
        from coa_envs.retrieval.dense import build_dense_index

        return build_dense_index(corpus, index, **options)
    raise ValueError(f"cannot build an index for backend {backend!r}; local backends: bm25, dense")


def open_retriever(backend: str, *, shared: bool = True, **config: Any) -> Retriever:
    """Open a retriever by backend name.

    ``bm25``/``dense`` take ``index`` (a directory from :func:`build_index`) and optionally
    ``corpus`` (the corpus file, if it moved); ``dense`` also ``model``/``device``.
    ``remote`` takes ``url``, ``timeout_s``, ``retries``, ``backoff_s``. With ``shared``
    (default) a local index is opened once per process and reused.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown retrieval backend {backend!r}; choose one of {BACKENDS}")
    if backend == "remote":
        from coa_envs.retrieval.remote import RemoteRetriever

        return RemoteRetriever(**config)
    if not config.get("index"):
        raise RetrievalIndexError(
            f"the {backend} backend needs an index directory (index=...). Build one with: "
            f"{build_hint(backend, 'INDEX_DIR', config.get('corpus'))}"
        )
    index = Path(config.pop("index")).expanduser().resolve()
    corpus = config.pop("corpus", None)
    key = (backend, str(index), str(corpus), tuple(sorted(config.items())))
    with _shared_lock:
        if shared and key in _shared:
            return _shared[key]
        if backend == "bm25":
            from coa_envs.retrieval.bm25 import BM25Retriever

            retriever: Retriever = BM25Retriever(index, corpus_path=corpus, **config)
        else:
            from coa_envs.retrieval.dense import DenseRetriever

            retriever = DenseRetriever(index, corpus_path=corpus, **config)
        if shared:
            _shared[key] = retriever
        return retriever
