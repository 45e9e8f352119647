"""Exact top-k BM25 over a bm25s index that only touches the postings that can matter.

bm25s scores a query by filling a dense ``num_docs`` score array from every posting of every
query term and then scanning all of it for the top k: on a 1M-passage corpus that is a 4 MB
array to zero and scan per query, plus every posting of the common words (often 10^5+).
Here (the classic "MaxScore" idea, term-at-a-time): terms are visited from the highest
possible contribution (``upper bound = max column score x multiplicity``) down; once the
sum of the unvisited terms' upper bounds is below the current k-th best partial score, no
unseen document can enter the top k, so the remaining (usually very common) terms are only
looked up -- by binary search in their sorted postings -- for the few documents still in
the running. Results and scores are the same as bm25s's (up to float rounding and the
order of exact ties, which here is by document number).

The query tokenizer reproduces ``bm25s.tokenize`` (the index's regex, lower-casing, stopwords
and PyStemmer stems) without its per-call setup, and caches stems; a self-check at start-up
falls back to ``bm25s.tokenize`` if a future bm25s tokenizes differently.

Needs ``numba`` (compiled once, cached on disk); without it the retriever uses bm25s's own
scorers. Scratch buffers are ``num_docs``-sized, one per concurrent search (bounded by the
CPU count), so several threads search in parallel: the kernel releases the GIL.
"""

from __future__ import annotations

import math
import os
import queue
import re
import threading
from typing import Any

import numpy as np

__all__ = ["LEGACY_TOKEN_PATTERN", "TOKEN_PATTERN", "PrunedScorer", "QueryTokenizer", "column_max"]

TOKEN_PATTERN = r"(?u)\b\w+\b"  # single letters and digits are terms too ("vitamin C", "World War 2")
LEGACY_TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s.tokenize's default: indexes that recorded no pattern
_STEM_CACHE_LIMIT = 1_000_000


class QueryTokenizer:
    """Query text -> vocabulary ids, exactly as ``bm25s.tokenize`` + the index's vocab would."""

    def __init__(self, vocab: dict[str, int], stopwords: str | None, stemmer: Any,
                 token_pattern: str = TOKEN_PATTERN) -> None:
        from coa_envs.retrieval.bm25s_import import import_bm25s

        import_bm25s()
        from bm25s.tokenization import _infer_stopwords

        self._vocab = vocab
        self._stopwords = stopwords
        self._stop = frozenset(_infer_stopwords(stopwords)) if stopwords else frozenset()
        self._pattern = token_pattern
        self._split = re.compile(token_pattern).findall
        self._stemmer = stemmer
        self._stem_lock = threading.Lock()  # PyStemmer objects are not thread-safe
        self._ids: dict[str, int] = {}  # surface token -> vocab id (-1: not in the vocabulary)
        probe = "The Röntgen rays were discovered; running runners ran 東京 x 42 a-b café's"
        self.exact = self._bm25s_ids(probe) == self(probe)

    def _bm25s_ids(self, text: str) -> list[int]:
        from coa_envs.retrieval.bm25s_import import import_bm25s

        bm25s = import_bm25s()
        with self._stem_lock:
            [tokens] = bm25s.tokenize(
                [text], token_pattern=self._pattern, stopwords=self._stopwords, stemmer=self._stemmer,
                return_ids=False, show_progress=False,
            )
        return [self._vocab[tok] for tok in tokens if tok and tok in self._vocab]

    def __call__(self, text: str) -> list[int]:
        tokens = [tok for tok in self._split(text.lower()) if tok not in self._stop]
        missing = [tok for tok in dict.fromkeys(tokens) if tok not in self._ids]
        if missing:
            if self._stemmer is not None:
                with self._stem_lock:
                    stems = self._stemmer.stemWords(missing)
            else:
                stems = missing
            if len(self._ids) > _STEM_CACHE_LIMIT:
                self._ids.clear()
            for tok, stem in zip(missing, stems, strict=True):
                self._ids[tok] = self._vocab.get(stem, -1)
        ids = [self._ids.get(tok, -1) for tok in tokens]
        return [i for i in ids if i >= 0]

    def ids(self, text: str) -> list[int]:
        return self(text) if self.exact else self._bm25s_ids(text)


# The kernels are plain functions here and compiled by _get_kernels() (numba is imported
# lazily). They call each other through the module globals ``_insert``/``_kth``/``_keep``, which
# _get_kernels() binds to the compiled versions before compiling their callers; numba
# resolves globals at compile time, and module-level functions can use its disk cache.
_insert: Any = None
_kth: Any = None
_keep: Any = None


def _insert_py(top_s, top_d, k, score, doc):  # pragma: no cover - compiled
    # keep (top_s, top_d) sorted by score desc, doc asc; -1 marks an empty slot
    if top_d[k - 1] >= 0 and (score < top_s[k - 1] or (score == top_s[k - 1] and doc > top_d[k - 1])):
        return
    j = k - 1
    while j > 0 and (top_d[j - 1] < 0 or score > top_s[j - 1] or (score == top_s[j - 1] and doc < top_d[j - 1])):
        top_s[j] = top_s[j - 1]
        top_d[j] = top_d[j - 1]
        j -= 1
    top_s[j] = score
    top_d[j] = doc


def _kth_py(acc, docs, n, k, top_s, top_d):  # pragma: no cover - compiled
    top_d[:] = -1
    for j in range(n):
        _insert(top_s, top_d, k, acc[docs[j]], docs[j])
    return top_s[k - 1] if top_d[k - 1] >= 0 else np.float32(0.0)


def _keep_py(source, n, cand, acc, bound, theta, mark):  # pragma: no cover - compiled
    # The documents of source[:n] that can still reach theta with ``bound`` more go to the
    # front of cand (source may be cand: the write never passes the read) and are marked 2,
    # the rest 1; returns how many stay.
    m = 0
    for j in range(n):
        d = source[j]
        if acc[d] + bound >= theta:
            cand[m] = d
            m += 1
            mark[d] = 2
        else:
            mark[d] = 1
    return m


def _search_py(data, indices, indptr, terms, weights, ubs, k, acc, mark, touched, cand, top_s, top_d):
    n_terms = terms.shape[0]
    # suffix[i]: the most that terms i.. can still add (exactly 0 at the end; float64, and
    # theta gets a small slack, so that rounding can never cut a document that belongs).
    suffix = np.zeros(n_terms + 1, dtype=np.float64)
    for i in range(n_terms - 1, -1, -1):
        suffix[i] = suffix[i + 1] + ubs[i]
    n = 0
    best = 0.0
    theta = 0.0
    i = 0
    # Phase A: whole postings, most valuable terms first, until nothing unseen can make the top k.
    while i < n_terms:
        t, w = terms[i], weights[i]
        for p in range(indptr[t], indptr[t + 1]):
            d = indices[p]
            if mark[d] == 0:
                mark[d] = 1
                touched[n] = d
                n += 1
            v = acc[d] + w * data[p]
            acc[d] = v
            if v > best:
                best = v
        i += 1
        if i < n_terms and n >= k and suffix[i] < best:
            theta = _kth(acc, touched, n, k, top_s, top_d) - 1e-5 * (1.0 + best)
            if suffix[i] < theta:
                break
    final = touched
    m = n
    if i < n_terms:
        # Phase B: the remaining terms only for documents that can still reach theta.
        m = _keep(touched, n, cand, acc, suffix[i], theta, mark)
        final = cand
        while i < n_terms:
            t, w = terms[i], weights[i]
            start, end = indptr[t], indptr[t + 1]
            if m * math.log2(end - start + 2) < end - start:
                for c in range(m):  # few candidates: binary search in the sorted postings
                    d = cand[c]
                    lo, hi = start, end
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if indices[mid] < d:
                            lo = mid + 1
                        else:
                            hi = mid
                    if lo < end and indices[lo] == d:
                        acc[d] += w * data[lo]
            else:
                for p in range(start, end):  # many: one pass over the postings
                    d = indices[p]
                    if mark[d] == 2:
                        acc[d] += w * data[p]
            i += 1
            if m > k:
                theta = max(theta, _kth(acc, cand, m, k, top_s, top_d) - 1e-5 * (1.0 + best))
                m = _keep(cand, m, cand, acc, suffix[i], theta, mark)
    top_d[:] = -1
    for j in range(m):
        d = final[j]
        if acc[d] > 0:
            _insert(top_s, top_d, k, acc[d], d)
    for j in range(n):  # leave the scratch clean for the next query
        acc[touched[j]] = 0
        mark[touched[j]] = 0


_compiled: Any = None
_compile_lock = threading.Lock()


def _get_kernel() -> Any:
    """Compile (or load from numba's on-disk cache) the search kernel, once per process."""
    global _compiled, _insert, _kth, _keep
    with _compile_lock:
        if _compiled is None:
            from numba import njit

            jit = njit(nogil=True, cache=True)
            _insert = jit(_insert_py)
            _kth = jit(_kth_py)
            _keep = jit(_keep_py)
            _compiled = jit(_search_py)
        return _compiled


def column_max(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Largest score of every term (its column in the CSC matrix): the pruning upper bounds."""
    indptr = np.asarray(indptr, dtype=np.int64)
    out = np.zeros(len(indptr) - 1, dtype=np.float32)
    nonempty = np.flatnonzero(indptr[1:] > indptr[:-1])
    if len(nonempty):
        out[nonempty] = np.maximum.reduceat(np.asarray(data), indptr[nonempty])
    return out


class PrunedScorer:
    """Top-k search over bm25s's CSC arrays (``data``, ``indices``, ``indptr``); thread-safe."""

    def __init__(self, scores: dict[str, Any], term_max: np.ndarray | None = None) -> None:
        self._kernel = _get_kernel()
        self._data = scores["data"]
        self._indices = scores["indices"]
        self._indptr = scores["indptr"]
        self.num_docs = int(scores["num_docs"])
        self._term_max = np.asarray(term_max if term_max is not None else column_max(self._data, self._indptr))
        if self._term_max.shape != (len(self._indptr) - 1,):
            raise ValueError("term maxima do not match the index's vocabulary")
        self._scratch: queue.LifoQueue[tuple[np.ndarray, ...]] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(max(2, os.cpu_count() or 2))  # caps scratch memory

    def _take(self) -> tuple[np.ndarray, ...]:
        try:
            return self._scratch.get_nowait()
        except queue.Empty:  # (acc, mark, touched, candidates); the kernel leaves acc/mark zeroed
            n = self.num_docs
            return np.zeros(n, np.float32), np.zeros(n, np.uint8), np.empty(n, np.int32), np.empty(n, np.int32)

    def search(self, token_ids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(doc numbers, scores), best first; fewer than ``k`` when fewer documents match."""
        if not token_ids:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        unique, counts = np.unique(np.asarray(token_ids, dtype=np.int64), return_counts=True)
        weights = counts.astype(np.float32)
        ubs = self._term_max[unique] * weights
        order = np.argsort(-ubs, kind="stable")
        terms, weights, ubs = unique[order], weights[order], np.ascontiguousarray(ubs[order], dtype=np.float32)
        k = max(1, min(int(k), self.num_docs))
        top_s = np.zeros(k, dtype=np.float32)
        top_d = np.full(k, -1, dtype=np.int64)
        with self._slots:
            scratch = self._take()
            try:
                self._kernel(self._data, self._indices, self._indptr, terms, weights, ubs, k, *scratch, top_s, top_d)
            finally:
                self._scratch.put(scratch)
        found = top_d >= 0
        return top_d[found], top_s[found]
