"""The pruned bm25 scorer returns exactly bm25s's top k (scores and documents, ties aside),
and the query tokenizer splits, filters and stems exactly like ``bm25s.tokenize``."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coa_envs.retrieval import Passage, RetrievalIndexError, write_corpus
from coa_envs.retrieval.bm25 import BM25Retriever, build_bm25_index
from coa_envs.retrieval.bm25_pruned import LEGACY_TOKEN_PATTERN, TOKEN_PATTERN

pytest.importorskip("numba", reason="the pruned scorer needs numba")


def _zipf_corpus(path, docs=3000, vocab=2000, seed=0):
    """Common words in most passages, rare ones in a few: the case pruning has to get right."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}x" for i in range(vocab)])
    weights = 1.0 / (np.arange(vocab) + 3.0)
    weights /= weights.sum()
    passages = [
        Passage(str(i), f"Doc {i}", " ".join(words[rng.choice(vocab, size=rng.integers(5, 40), p=weights)]))
        for i in range(docs)
    ]
    return write_corpus(passages, path), words, weights


@pytest.fixture(scope="module")
def zipf_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("zipf")
    corpus, words, weights = _zipf_corpus(root / "corpus.jsonl")
    index = build_bm25_index(corpus, root / "bm25", show_progress=False)
    return index, words, weights


def _queries(words, weights, count, seed=1):
    rng = np.random.default_rng(seed)
    queries = [" ".join(words[rng.choice(len(words), size=rng.integers(1, 7), p=weights)]) for _ in range(count)]
    return queries + ["w0x w0x w1x", "w1999x", "w0x", "nothing here"]  # duplicates, rare-only, common-only, none


@pytest.mark.parametrize("k", [1, 3, 10, 50])
def test_pruned_top_k_is_exactly_the_full_scoring_top_k(zipf_index, k):
    index, words, weights = zipf_index
    pruned = BM25Retriever(index, scorer="pruned")
    full = BM25Retriever(index, scorer="numpy")
    assert pruned.scorer == "pruned" and full.scorer == "numpy"
    queries = _queries(words, weights, 150)
    for query, hits in zip(queries, pruned.search(queries, k=k), strict=True):  # >= 16 queries: threaded path
        ids = full._query_token_ids([query])[0]
        scores = full._model.get_scores(ids) if ids else np.zeros(full.num_docs)
        expected = np.sort(scores[scores > 0])[::-1][:k]
        got = np.array([hit.score for hit in hits])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=query)
        for hit in hits:  # every returned document really has the score reported for it
            assert scores[int(hit.passage.doc_id)] == pytest.approx(hit.score, rel=1e-5)
        if len(expected) == k and len(scores) > k:  # nothing left out scores above the k-th
            assert np.sum(scores > expected[-1] + 1e-5) < k


def test_pruned_and_bm25s_rankings_agree_one_query_at_a_time(zipf_index):
    index, words, weights = zipf_index
    pruned, full = BM25Retriever(index, scorer="pruned"), BM25Retriever(index, scorer="numpy")
    for query in _queries(words, weights, 40, seed=2):
        [a], [b] = pruned.search([query], k=5), full.search([query], k=5)
        assert [round(h.score, 4) for h in a] == [round(h.score, 4) for h in b], query


def test_auto_scorer_and_indexes_built_without_term_maxima(zipf_index, tmp_path):
    index, words, weights = zipf_index
    assert BM25Retriever(index).scorer == "numpy"  # 3,000 passages: no JIT needed
    old = tmp_path / "old"
    shutil.copytree(index, old)
    (old / "coa_term_max.npy").unlink()  # indexes from before the pruned scorer
    query = _queries(words, weights, 1)[0]
    assert [h.score for h in BM25Retriever(old, scorer="pruned").search([query], k=3)[0]] == [
        h.score for h in BM25Retriever(index, scorer="pruned").search([query], k=3)[0]
    ]
    with pytest.raises(ValueError, match="scorer must be one of"):
        BM25Retriever(index, scorer="fast")
    np.save(old / "coa_term_max.npy", np.zeros(3, dtype=np.float32))  # wrong length: a damaged index
    with pytest.raises(RetrievalIndexError, match=r"coa_term_max.*Rebuild"):
        BM25Retriever(old, scorer="pruned")


_WORDS = st.sampled_from(
    ["The", "running", "Runners", "ran", "Röntgen", "café's", "東京", "x", "42", "a-b", "of", "IS", "naïve", "über"]
)


@pytest.mark.parametrize("pattern", [TOKEN_PATTERN, LEGACY_TOKEN_PATTERN])
@settings(max_examples=150, deadline=None)
@given(text=st.lists(_WORDS | st.text(max_size=12), max_size=12).map(" ".join))
def test_query_tokenizer_matches_bm25s_tokenize(pattern, text):
    """Same tokens, same order, same stems: the vocabulary holds exactly bm25s's stems of the text
    (with today's pattern and with the one of indexes built before it was recorded)."""
    import bm25s
    import Stemmer

    from coa_envs.retrieval.bm25_pruned import QueryTokenizer

    [tokens] = bm25s.tokenize([text], token_pattern=pattern, stopwords="en", stemmer=Stemmer.Stemmer("english"),
                              return_ids=False, show_progress=False)
    tokens = [tok for tok in tokens if tok]
    vocab = {tok: i for i, tok in enumerate(sorted(set(tokens)))}
    tokenizer = QueryTokenizer(vocab, "en", Stemmer.Stemmer("english"), pattern)
    assert tokenizer(text) == [vocab[tok] for tok in tokens]


def test_pruned_scorer_is_safe_from_many_threads(zipf_index):
    from concurrent.futures import ThreadPoolExecutor

    index, words, weights = zipf_index
    retriever = BM25Retriever(index, scorer="pruned")
    queries = _queries(words, weights, 200, seed=5)
    expected = [[(h.passage.doc_id, h.score) for h in retriever.search([q], k=4)[0]] for q in queries]
    with ThreadPoolExecutor(8) as pool:  # more threads than scratch buffers: callers wait for one
        got = list(pool.map(lambda q: [(h.passage.doc_id, h.score) for h in retriever.search([q], k=4)[0]], queries))
    assert got == expected
