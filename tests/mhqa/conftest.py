"""Shared fixtures for the multi-hop QA tests: a small hand-written corpus and its bm25 index."""

from __future__ import annotations

from pathlib import Path

import pytest

from coa_envs.retrieval import Passage, write_corpus
from coa_envs.retrieval.bm25 import build_bm25_index

FIXTURES = Path(__file__).parent / "fixtures"

PASSAGES = [
    Passage("0", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, completed in 1889."),
    Passage("1", "Danube", "The Danube is the second-longest river in Europe and flows through Budapest."),
    Passage("2", "Wilhelm Röntgen", "Wilhelm Conrad Röntgen received the first Nobel Prize in Physics in 1901."),
    Passage("3", "Budapest", "Budapest is the capital and most populous city of Hungary."),
    Passage("4", "Tokyo", "Tokyo (東京) is the capital of Japan and its largest city."),
    Passage("5", "München", "München, also called Munich, is the capital of Bavaria on the Isar river."),
    Passage("6", "Charles Darwin", "Charles Darwin sailed on HMS Beagle and wrote On the Origin of Species."),
    Passage("7", "Georges Bizet", "Georges Bizet was a French composer born in Paris, best known for Carmen."),
    Passage("8", "Volga", "The Volga is the longest river in Europe and flows into the Caspian Sea."),
    Passage("9", "Petra", "Petra is an ancient city in southern Jordan carved into sandstone cliffs."),
]


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    return write_corpus(PASSAGES, tmp_path_factory.mktemp("corpus") / "corpus.jsonl")


@pytest.fixture(scope="session")
def small_index(small_corpus, tmp_path_factory) -> Path:
    return build_bm25_index(small_corpus, tmp_path_factory.mktemp("idx") / "bm25", show_progress=False)
