"""BM25 retrieval with ``bm25s``: build an index once, save it, load it memory-mapped.

The index directory holds bm25s's sparse score matrix (``*.npy``, memory-mapped on load so
a wiki-sized index costs page cache, not heap), ``doc_offsets.npy`` (byte offset of every
passage in the corpus file, so passages are read on demand instead of being copied into
the index) and ``coa_index.json`` (backend, corpus path and size, tokenizer settings).
Builds go to a temporary sibling directory and are renamed into place, so an interrupted
build never leaves something that looks like a valid index.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from coa_envs.retrieval.base import (
    RetrievalIndexError,
    SearchHit,
    build_hint,
    read_index_meta,
    write_index_meta,
)
from coa_envs.retrieval.corpus import CorpusReader, iter_corpus

__all__ = ["BM25Retriever", "build_bm25_index"]

log = logging.getLogger(__name__)

_OFFSETS_FILE = "doc_offsets.npy"
_NUMBA_MIN_DOCS = 200_000
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


def _tokenize(texts: list[str], stopwords: str | None, stemmer: Any, show_progress: bool) -> Any:
    import bm25s

    return bm25s.tokenize(texts, stopwords=stopwords, stemmer=stemmer, return_ids=True, show_progress=show_progress)


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
    k1: float = 0.9,
    b: float = 0.4,
    show_progress: bool = True,
    overwrite: bool = False,
) -> Path:
    """Index a jsonl corpus (``{"id","contents"}``) into ``index_dir`` and return the path.

    ``k1=0.9, b=0.4`` are Pyserini's defaults, which Search-R1/FlashRAG's BM25 runs use.
    """
    import bm25s

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

    tokens = _tokenize(texts, stopwords, _make_stemmer(stemmer), show_progress)
    del texts
    model = bm25s.BM25(k1=k1, b=b)
    model.index(tokens, show_progress=show_progress)

    index_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{index_dir.name}.", dir=index_dir.parent))
    try:
        model.save(str(staging), show_progress=False)
        np.save(staging / _OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
        stat = corpus_path.stat()
        write_index_meta(
            staging,
            {
                "backend": "bm25",
                "corpus_path": str(corpus_path),
                "corpus_bytes": stat.st_size,
                "num_docs": len(offsets),
                "stemmer": stemmer,
                "stopwords": stopwords,
                "k1": k1,
                "b": b,
            },
        )
        if index_dir.exists():
            shutil.rmtree(index_dir)
        os.replace(staging, index_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
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
        import bm25s

        self.index_dir = Path(index_dir)
        meta = read_index_meta(self.index_dir, "bm25")
        self.meta = meta
        corpus = Path(corpus_path) if corpus_path else Path(meta["corpus_path"])
        hint = build_hint("bm25", self.index_dir, corpus)
        if not corpus.is_file():
            raise RetrievalIndexError(
                f"the corpus this index was built from is gone: {corpus}. Pass corpus=... "
                f"(--corpus) with its new location, or rebuild: {hint}"
            )
        if corpus.stat().st_size != meta.get("corpus_bytes"):
            raise RetrievalIndexError(
                f"{corpus} changed since the index was built (size differs). Rebuild: {hint} --overwrite"
            )
        missing = [name for name in (*_BM25S_FILES, _OFFSETS_FILE) if not (self.index_dir / name).is_file()]
        if missing:
            raise RetrievalIndexError(f"{self.index_dir} is incomplete (missing {missing}). Rebuild: {hint}")
        # numba scores ~2-5x faster on big corpora but JIT-compiles for 10-25 s on the first
        # query of every process; "auto" only pays that where it is repaid.
        if scorer not in ("auto", "numba", "numpy"):
            raise ValueError(f"bm25 scorer must be auto, numba or numpy, not {scorer!r}")
        big = int(meta.get("num_docs", 0)) >= _NUMBA_MIN_DOCS
        use_numba = scorer == "numba" or (scorer == "auto" and big and _numba_available())
        try:
            self._model = bm25s.BM25.load(
                str(self.index_dir),
                mmap=mmap,
                show_progress=False,
                backend="numba" if use_numba else "numpy",
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
        self.num_docs = num_docs
        self._corpus = CorpusReader(corpus, offsets)
        self._vocab: dict[str, int] = self._model.vocab_dict
        self._stopwords = meta.get("stopwords")
        self._stemmer = _make_stemmer(meta.get("stemmer"))
        self._stem_lock = threading.Lock()

    def _query_token_ids(self, queries: list[str]) -> list[list[int]]:
        import bm25s

        with self._stem_lock:  # a PyStemmer object must not be used by two threads at once
            tokenized = bm25s.tokenize(
                queries,
                stopwords=self._stopwords,
                stemmer=self._stemmer,
                return_ids=False,
                show_progress=False,
            )
        return [[self._vocab[tok] for tok in toks if tok and tok in self._vocab] for toks in tokenized]

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
        docs, scores = self._model.retrieve([token_ids[i] for i in answerable], k=k, show_progress=False, n_threads=0)
        for row, query_index in enumerate(answerable):
            results[query_index] = [
                SearchHit(self._corpus.get(int(doc)), float(score))
                for doc, score in zip(docs[row], scores[row], strict=True)
                if score > 0
            ]
        return results

    def close(self) -> None:
        self._corpus.close()
