"""Reading passage corpora in the common retrieval jsonl format.

One passage per line: ``{"id": ..., "contents": "Title\\ntext..."}`` -- the format
Search-R1 and FlashRAG use for wiki-18, where the first line of ``contents`` is the
article title. Passages are read lazily by byte offset so a 10 GB corpus is never held in
memory: the index stores the offsets (``doc_offsets.npy``) and reads rows with ``os.pread``,
which is safe from several threads at once.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coa_envs.errors import UserError

__all__ = [
    "CorpusError",
    "CorpusReader",
    "Passage",
    "iter_corpus",
    "passage_from_row",
    "write_corpus",
]


class CorpusError(UserError, ValueError):
    """A corpus file is missing or a row is not ``{"id", "contents"}`` json."""


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrievable passage. ``contents`` is the raw field (title line + text)."""

    doc_id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text

    def to_row(self) -> dict[str, str]:
        """The corpus/Search-R1 wire form of the passage."""
        return {"id": self.doc_id, "contents": self.contents}


def passage_from_row(row: dict[str, Any], where: str = "") -> Passage:
    """Split a corpus row into id, title (first line of contents) and text."""
    if "contents" not in row:
        # FlashRAG also writes {"id", "title", "text"}; accept it rather than fail.
        if "text" in row:
            return Passage(str(row.get("id", "")), str(row.get("title", "")), str(row["text"]))
        raise CorpusError(f"{where}: row has no 'contents' field (keys: {sorted(row)})")
    contents = str(row["contents"])
    title, sep, text = contents.partition("\n")
    if not sep:
        title, text = "", contents
    return Passage(str(row.get("id", "")), title.strip().strip('"'), text.strip())


def iter_corpus(path: str | Path) -> Iterator[tuple[int, Passage]]:
    """Yield ``(byte_offset, passage)`` for every non-empty line of a jsonl corpus."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    offset = 0
    with path.open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            start = offset
            offset += len(line)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{path}:{line_no}: not valid json ({exc.msg})") from exc
            yield start, passage_from_row(row, where=f"{path}:{line_no}")


def write_corpus(passages: list[Passage], path: str | Path) -> Path:
    """Write passages as a jsonl corpus (used by SynthHop and the tests/benchmarks)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for passage in passages:
            handle.write(json.dumps(passage.to_row(), ensure_ascii=False) + "\n")
    return path


class CorpusReader:
    """Random access to corpus rows by index, using the offsets saved with an index."""

    def __init__(self, corpus_path: str | Path, offsets: np.ndarray) -> None:
        self.path = Path(corpus_path)
        if not self.path.is_file():
            raise CorpusError(f"corpus file not found: {self.path}")
        self._offsets = offsets
        self._fd = os.open(self.path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size

    def __len__(self) -> int:
        return len(self._offsets)

    def get(self, index: int) -> Passage:
        start = int(self._offsets[index])
        end = int(self._offsets[index + 1]) if index + 1 < len(self._offsets) else self._size
        raw = os.pread(self._fd, end - start, start)
        line = raw.split(b"\n", 1)[0]
        return passage_from_row(json.loads(line), where=f"{self.path}@{start}")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        with contextlib.suppress(OSError):
            self.close()
