"""BM25 retrieval with ``bm25s``: build an index once, save it, load it memory-mapped.

The index directory holds bm25s's sparse score matrix (``*.npy``, memory-mapped on load so
a wiki-sized index costs page cache, not heap), ``doc_offsets.npy`` (byte offset of every
passage in the corpus file, so passages are read on demand instead of being copied into
the index) and ``coa_index.json`` (backend, corpus path and size, tokenizer settings).
Builds go to a temporary sibling directory and are renamed into place, so an interrupted
build never leaves something that looks like a valid index. ``coa_term_max.npy`` (each
term's best score) lets the ``pruned`` scorer (:mod:`coa_envs.retrieval.bm25_pruned`, the
default for big corpora when numba is installed) skip postings that cannot reach the top k.

Tokens are runs of word characters of any length (:data:`TOKEN_PATTERN`): bm25s's default
keeps only runs of two or more, so "World War 2" and "vitamin C" lost the very term that
tells them apart. The pattern an index was built with is stored in its metadata and queries
are tokenised with that one, so indexes built before keep answering as they did.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from coa_envs.retrieval.base import (
    RetrievalIndexError,
    SearchHit,
    open_index,
    staged_index,
)
from coa_envs.retrieval.bm25_pruned import (
    LEGACY_TOKEN_PATTERN,
    TOKEN_PATTERN,
    PrunedScorer,
    QueryTokenizer,
    column_max,
)
from coa_envs.retrieval.corpus import CorpusReader, iter_corpus

__all__ = ["TOKEN_PATTERN", "BM25Retriever", "build_bm25_index"]

log = logging.getLogger(__name__)

_OFFSETS_FILE = "doc_offsets.npy"
_TERM_MAX_FILE = "coa_term_max.npy"
_PRUNED_MIN_DOCS = 20_000  # below this bm25s's numpy scorer is already fast and needs no JIT
_SCORERS = ("auto", "pruned", "numba", "numpy")
_PARALLEL_MIN_QUERIES = 16
_BM25S_FILES = (
    "data.csc.index.npy",
    "indices.csc.index.npy",
    "indptr.csc.index.npy",
    "vocab.index.json",
    "params.index.json",
)


def _numba_available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def _tokenize(texts: list[str], token_pattern: str, stopwords: str | None, stemmer: Any, show_progress: bool) -> Any:
    from coa_envs.retrieval.bm25s_import import import_bm25s

    bm25s = import_bm25s()

    return bm25s.tokenize(texts, token_pattern=token_pattern, stopwords=stopwords, stemmer=stemmer,
                          return_ids=True, show_progress=show_progress)


def _make_stemmer(language: str | None) -> Any:
    if not language:
        return None
    import Stemmer  # PyStemmer

    return Stemmer.Stemmer(language)


def build_bm25_index(
    corpus_path: str | Path,
    index_dir: str | Path,
    *,
    stemmer: str | None = "english",
    stopwords: str | None = "en",
    token_pattern: str = TOKEN_PATTERN,
    k1: float = 0.9,
    b: float = 0.4,
    show_progress: bool = True,
    overwrite: bool = False,
) -> Path:
    """Index a jsonl corpus (``{"id","contents"}``) into ``index_dir`` and return the path.

    ``k1=0.9, b=0.4`` are Pyserini's defaults, which Search-R1/FlashRAG's BM25 runs use.
    """
    from coa_envs.retrieval.bm25s_import import import_bm25s

    bm25s = import_bm25s()

    corpus_path = Path(corpus_path).resolve()
    index_dir = Path(index_dir)
    if index_dir.exists() and not overwrite:
        raise FileExistsError(f"{index_dir} exists; pass overwrite=True (--overwrite) to rebuild")
    offsets: list[int] = []
    texts: list[str] = []
    rows = iter_corpus(corpus_path)
    if show_progress:
        from tqdm.auto import tqdm

        rows = tqdm(rows, desc="Reading corpus", unit=" passages")
    for offset, passage in rows:
        offsets.append(offset)
        texts.append(passage.contents)
    if not texts:
        raise RetrievalIndexError(f"corpus {corpus_path} has no passages")

    tokens = _tokenize(texts, token_pattern, stopwords, _make_stemmer(stemmer), show_progress)
    del texts
    model = bm25s.BM25(k1=k1, b=b)
    model.index(tokens, show_progress=show_progress)

    with staged_index(index_dir, "bm25", corpus_path, len(offsets), stemmer=stemmer, stopwords=stopwords,
                      token_pattern=token_pattern, k1=k1, b=b) as staging:
        model.save(str(staging), show_progress=False)
        np.save(staging / _OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
        np.save(staging / _TERM_MAX_FILE, column_max(model.scores["data"], model.scores["indptr"]))
    log.info("built bm25 index of %d passages at %s", len(offsets), index_dir)
    return index_dir


class BM25Retriever:
    """Searches a saved bm25s index; thread-safe (the stemmer is the only shared mutable part)."""

    backend = "bm25"

    def __init__(
        self,
        index_dir: str | Path,
        *,
        corpus_path: str | Path | None = None,
        mmap: bool = True,
        scorer: str = "auto",
    ) -> None:
        from coa_envs.retrieval.bm25s_import import import_bm25s

        bm25s = import_bm25s()

        self.index_dir = Path(index_dir)
        meta, corpus, hint = open_index(self.index_dir, "bm25", corpus_path)
        self.meta = meta
        missing = [name for name in (*_BM25S_FILES, _OFFSETS_FILE) if not (self.index_dir / name).is_file()]
        if missing:
            raise RetrievalIndexError(f"{self.index_dir} is incomplete (missing {missing}). Rebuild: {hint}")
        # "pruned" (numba) only visits postings that can reach the top k; bm25s's "numba" and
        # "numpy" scorers fill and scan a num_docs-sized array per query. "auto" picks pruned
        # for big corpora when numba is installed (its one-off compile is cached on disk).
        if scorer not in _SCORERS:
            raise ValueError(f"bm25 scorer must be one of {_SCORERS}, not {scorer!r}")
        if scorer == "auto":
            big = int(meta.get("num_docs", 0)) >= _PRUNED_MIN_DOCS
            scorer = "pruned" if big and _numba_available() else "numpy"
        self.scorer = scorer
        try:
            self._model = bm25s.BM25.load(
                str(self.index_dir),
                mmap=mmap,
                show_progress=False,
                backend="numba" if scorer == "numba" else "numpy",
            )
            offsets = np.load(self.index_dir / _OFFSETS_FILE, mmap_mode="r" if mmap else None)
        except Exception as exc:  # bm25s/numpy raise many types on truncated files
            raise RetrievalIndexError(f"{self.index_dir} is corrupt ({exc!r}). Rebuild: {hint} --overwrite") from exc
        num_docs = int(self._model.scores["num_docs"])
        if num_docs != len(offsets) or num_docs != meta.get("num_docs"):
            raise RetrievalIndexError(
                f"{self.index_dir} is inconsistent ({num_docs} scored docs, {len(offsets)} offsets). "
                f"Rebuild: {hint} --overwrite"
            )
        self._pruned: PrunedScorer | None = None
        if scorer == "pruned":
            term_max_file = self.index_dir / _TERM_MAX_FILE
            try:
                term_max = np.load(term_max_file) if term_max_file.is_file() else None  # older indexes: computed now
                self._pruned = PrunedScorer(self._model.scores, term_max)
            except (OSError, ValueError) as exc:
                raise RetrievalIndexError(f"{term_max_file} is corrupt ({exc}). Rebuild: {hint} --overwrite") from exc
        self._pool: Any = None
        self._pool_lock = threading.Lock()
        self.num_docs = num_docs
        self._corpus = CorpusReader(corpus, offsets)
        self._tokenizer = QueryTokenizer(
            self._model.vocab_dict, meta.get("stopwords"), _make_stemmer(meta.get("stemmer")),
            meta.get("token_pattern", LEGACY_TOKEN_PATTERN),  # indexes from before it was recorded
        )

    def _query_token_ids(self, queries: list[str]) -> list[list[int]]:
        return [self._tokenizer.ids(query) for query in queries]

    def _pruned_search(self, token_ids: list[list[int]], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        assert self._pruned is not None
        search = self._pruned.search
        if len(token_ids) < _PARALLEL_MIN_QUERIES or (os.cpu_count() or 1) < 2:
            return [search(ids, k) for ids in token_ids]
        with self._pool_lock:  # a batch (server, benchmarks): one worker per core, the kernel drops the GIL
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(os.cpu_count(), thread_name_prefix="bm25")
        return list(self._pool.map(lambda ids: search(ids, k), token_ids))

    def search(self, queries: list[str], k: int = 3) -> list[list[SearchHit]]:
        """Top-``k`` passages per query, best first; queries matching no term get ``[]``."""
        if not queries:
            return []
        k = max(1, min(int(k), self.num_docs))
        token_ids = self._query_token_ids(list(queries))
        answerable = [i for i, ids in enumerate(token_ids) if ids]
        results: list[list[SearchHit]] = [[] for _ in queries]
        if not answerable:
            return results
        if self._pruned is not None:
            ranked = self._pruned_search([token_ids[i] for i in answerable], k)
        else:
            docs, scores = self._model.retrieve(
                [token_ids[i] for i in answerable], k=k, show_progress=False, n_threads=0
            )
            ranked = list(zip(docs, scores, strict=True))
        for query_index, (docs_row, scores_row) in zip(answerable, ranked, strict=True):
            results[query_index] = [
                SearchHit(self._corpus.get(int(doc)), float(score))
                for doc, score in zip(docs_row, scores_row, strict=True)
                if score > 0
            ]
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self._corpus.close()
