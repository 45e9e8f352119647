"""A local page collection and its BM25 index: the offline stand-in for a web search engine.

Format (agreed with the mini-web generator): JSONL, one page per line,
``{"url": ..., "title": ..., "text": ...}``. A path may be one such file or a directory;
a directory contributes every ``*.jsonl`` file in it, or — when it has none — every
``.html``/``.htm``/``.txt`` file below it, addressed as ``base_url`` + relative path and
turned into text with the crawler's extractor.

Indexes are built once per (path, modification time) and shared by every tool instance in
the process, so 32 concurrent episodes do not build 32 indexes.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalIndex", "Page", "best_snippet", "load_pages", "shared_index"]

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    title: str
    text: str


def _pages_from_jsonl(path: Path) -> list[Page]:
    pages = []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                pages.append(Page(str(row["url"]), str(row.get("title") or ""), str(row.get("text") or "")))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{line_no}: each line must be a JSON object with "
                                 f"'url', 'title' and 'text' ({exc})") from exc
    return pages


def _pages_from_html_dir(root: Path, base_url: str) -> list[Page]:
    from coa_envs.web.extract import ExtractionError, extract

    pages = []
    for file in sorted(root.rglob("*")):
        if file.suffix.lower() not in (".html", ".htm", ".txt") or not file.is_file():
            continue
        url = base_url.rstrip("/") + "/" + file.relative_to(root).as_posix()
        try:
            page = extract(file.read_bytes(), "text/html" if file.suffix != ".txt" else "text/plain",
                           url=url, max_links=0)
        except ExtractionError:
            continue
        pages.append(Page(url, page.title, page.text))
    return pages


def load_pages(path: str | Path, base_url: str = "http://127.0.0.1") -> list[Page]:
    """Read a collection (see the module docstring); raise ``ValueError`` with the fix on bad data."""
    root = Path(path).expanduser()
    if root.is_file():
        return _pages_from_jsonl(root)
    if root.is_dir():
        files = sorted(root.glob("*.jsonl"))
        if files:
            return [page for file in files for page in _pages_from_jsonl(file)]
        return _pages_from_html_dir(root, base_url)
    raise ValueError(f"page collection {root} does not exist (give a JSONL file of "
                     f"{{url, title, text}} pages or a directory of them)")


def _terms(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text) if len(w) > 2}


def best_snippet(text: str, query: str, max_chars: int = 300) -> str:
    """The sentence (plus its successor) sharing most words with the query, cut to ``max_chars``."""
    sentences = [s.strip() for s in _SENTENCE_SPLIT.split(text) if s.strip()]
    if not sentences:
        return ""
    wanted = _terms(query)
    scores = [len(_terms(s) & wanted) for s in sentences]
    best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
    snippet = " ".join(sentences[best: best + 2])
    return snippet if len(snippet) <= max_chars else snippet[: max_chars - 3].rstrip() + "..."


class LocalIndex:
    """BM25 (bm25s) over titles and texts of a page collection."""

    def __init__(self, pages: list[Page]) -> None:
        from coa_envs.retrieval.bm25s_import import import_bm25s

        bm25s = import_bm25s()

        if not pages:
            raise ValueError("the page collection is empty")
        self.pages = pages
        self._stemmer = _stemmer()
        corpus = [f"{p.title}\n{p.title}\n{p.text}" for p in pages]  # title counted twice: it is a strong signal
        tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=self._stemmer, show_progress=False)
        self._retriever = bm25s.BM25()
        self._retriever.index(tokens, show_progress=False)
        self._lock = threading.Lock()

    def search(self, query: str, top_k: int) -> list[tuple[Page, float]]:
        from coa_envs.retrieval.bm25s_import import import_bm25s

        bm25s = import_bm25s()

        tokens = bm25s.tokenize([query], stopwords="en", stemmer=self._stemmer, return_ids=False,
                                show_progress=False)
        if not tokens or not tokens[0]:
            return []
        k = min(top_k, len(self.pages))
        with self._lock:  # bm25s keeps per-call scratch state; one query at a time is plenty fast
            docs, scores = self._retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [(self.pages[int(d)], float(s)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


def _stemmer() -> object | None:
    try:
        import Stemmer

        return Stemmer.Stemmer("english")
    except ImportError:  # PyStemmer is optional; BM25 without stemming still works
        return None


_SHARED: dict[tuple[str, float, str], LocalIndex] = {}
_SHARED_LOCK = threading.Lock()


def shared_index(path: str | Path, base_url: str = "http://127.0.0.1") -> LocalIndex:
    """The index for ``path``, built on first use and reused while the file is unchanged."""
    resolved = Path(path).expanduser().resolve()
    mtime = resolved.stat().st_mtime if resolved.exists() else -1.0
    key = (str(resolved), mtime, base_url)
    with _SHARED_LOCK:
        index = _SHARED.get(key)
        if index is None:
            index = LocalIndex(load_pages(resolved, base_url))
            _SHARED[key] = index
        return index
