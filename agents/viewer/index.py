"""A line-offset index over one trajectory JSONL file, so the viewer never holds the file.

Indexing reads the file once, line by line, and keeps per line only its byte offset and the
dozen numbers the episode list filters and sorts on (about 60 bytes a line, in compact
``array`` columns; strings such as env and task ids are interned once in a shared
:class:`Vocab`). Showing an episode seeks to its offset and parses that one line. Memory is
therefore bounded by the number of lines and the longest line, not by the file size: a
100 MB file of 5 kB trajectories costs about 1.2 MB of index.

The file may still be growing (``coa eval`` streams episodes as they finish) or be replaced
(``coa eval`` rewrites it sorted at the end): :meth:`FileIndex.refresh` indexes only the
bytes appended since the last call, and starts over when the file was replaced or shrank.
A last line without its newline is either still being written or was cut off by a crash;
it is reported as a torn tail and indexed once it is complete. A broken line in the middle
becomes an "unreadable" row that the page shows with its error and the start of its bytes.
"""

from __future__ import annotations

import math
import os
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.viewer.records import Record, UnreadableRecord, parse_record, summarize_record

__all__ = ["UNREADABLE", "FileIndex", "TornTail", "Vocab", "Vocabs"]

#: Status (and env/task placeholder) of a line that could not be read as a trajectory.
UNREADABLE = "unreadable"
_RAW_PREVIEW_BYTES = 4096
# Column name -> array typecode. ``q``: byte positions and lengths; ``d``: reward (NaN when
# unreadable); ``i``: codes into a Vocab and small counts; ``b``: flags.
_COLUMNS = {"offset": "q", "length": "q", "line": "q", "env": "i", "task": "i", "status": "i",
            "reward": "d", "sample": "i", "turns": "i", "tokens": "q", "chars": "q",
            "tool_calls": "i", "tool_errors": "i", "has_ids": "b"}


class Vocab:
    """Strings interned to small ints, shared by every file so codes compare across runs."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self.names: list[str] = []
        self._lock = threading.Lock()

    def code(self, name: str) -> int:
        found = self._codes.get(name)
        if found is not None:
            return found
        with self._lock:
            if name not in self._codes:
                self._codes[name] = len(self.names)
                self.names.append(name)
            return self._codes[name]

    def lookup(self, name: str) -> int | None:
        return self._codes.get(name)

    def matching(self, needle: str) -> np.ndarray:
        """Codes of every name containing ``needle`` (case-insensitive)."""
        needle = needle.casefold()
        return np.array([i for i, n in enumerate(list(self.names)) if needle in n.casefold()], dtype=np.int32)


@dataclass(frozen=True, slots=True)
class Vocabs:
    env: Vocab
    task: Vocab
    status: Vocab

    @classmethod
    def new(cls) -> Vocabs:
        return cls(Vocab(), Vocab(), Vocab())


@dataclass(frozen=True, slots=True)
class TornTail:
    """The last bytes of the file, which do not end in a newline and do not parse."""

    offset: int
    length: int
    line: int
    error: str


class FileIndex:
    """Offsets and list columns of one JSONL file; thread-safe; refreshes incrementally."""

    def __init__(self, path: str | os.PathLike[str], vocabs: Vocabs) -> None:
        self.path = Path(path)
        self.vocabs = vocabs
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self._columns = {name: array(code) for name, code in _COLUMNS.items()}
        self._indexed_bytes = 0
        self._lines = 0
        self._identity: tuple[int, int] | None = None
        self._size = -1
        self._snapshot: dict[str, np.ndarray] | None = None
        self.torn_tail: TornTail | None = None
        self.unreadable = 0
        self.generation = 0  # bumps when rows are renumbered (file replaced)

    # -- indexing -------------------------------------------------------------------------
    def refresh(self) -> None:
        """Index what was appended since the last call (or everything, if the file changed)."""
        with self._lock:
            try:
                stat = os.stat(self.path)
            except FileNotFoundError:
                raise FileNotFoundError(f"{self.path} is gone (moved or deleted while the viewer runs)") from None
            identity = (stat.st_dev, stat.st_ino)
            if self._identity is not None and (identity != self._identity or stat.st_size < self._indexed_bytes):
                generation = self.generation + 1
                self._reset()
                self.generation = generation
            if identity == self._identity and stat.st_size == self._size:
                return
            self._identity, self._size = identity, stat.st_size
            self._index_from(self._indexed_bytes)

    def _index_from(self, start: int) -> None:
        self.torn_tail = None
        offset = start
        with open(self.path, "rb") as handle:
            handle.seek(start)
            for line in handle:
                if not line.endswith(b"\n"):  # the last bytes: complete JSON, or a torn tail
                    try:
                        record = parse_record(line, check_items=False)
                    except UnreadableRecord as exc:
                        self.torn_tail = TornTail(offset, len(line), self._lines + 1, str(exc))
                        break
                    self._add(offset, len(line), record, None)
                    offset += len(line)
                    break
                if line.strip():
                    try:
                        self._add(offset, len(line), parse_record(line, check_items=False), None)
                    except UnreadableRecord as exc:
                        self._add(offset, len(line), None, str(exc))
                else:
                    self._lines += 1
                offset += len(line)
        self._indexed_bytes = offset
        self._snapshot = None

    def _add(self, offset: int, length: int, record: Record | None, error: str | None) -> None:
        self._lines += 1
        columns = self._columns
        columns["offset"].append(offset)
        columns["length"].append(length)
        columns["line"].append(self._lines)
        if record is None:
            self.unreadable += 1
            codes = [self.vocabs.env.code(UNREADABLE), self.vocabs.task.code(UNREADABLE),
                     self.vocabs.status.code(UNREADABLE)]
            numbers: list[Any] = [math.nan, 0, 0, 0, 0, 0, 0, 0]
        else:
            row = summarize_record(record)
            codes = [self.vocabs.env.code(row.env_id), self.vocabs.task.code(row.task_id),
                     self.vocabs.status.code(row.status)]
            numbers = [row.reward, row.sample_index, row.turns, row.tokens, row.chars, row.tool_calls,
                       row.tool_errors, int(row.has_ids)]
        for name, value in zip(("env", "task", "status"), codes, strict=True):
            columns[name].append(value)
        for name, value in zip(("reward", "sample", "turns", "tokens", "chars", "tool_calls", "tool_errors",
                                "has_ids"), numbers, strict=True):
            columns[name].append(value)

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._columns["offset"])

    def columns(self) -> dict[str, np.ndarray]:
        """A numpy snapshot of the columns (rebuilt only after the index changed)."""
        with self._lock:
            if self._snapshot is None:
                self._snapshot = {name: np.array(values) for name, values in self._columns.items()}
            return self._snapshot

    def raw_line(self, row: int, limit: int | None = None) -> bytes:
        """The bytes of row ``row`` (at most ``limit``), read with one seek."""
        with self._lock:
            if not 0 <= row < len(self):
                raise IndexError(f"row {row} is out of range (the file has {len(self)} rows)")
            offset, length = self._columns["offset"][row], self._columns["length"][row]
        with open(self.path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length if limit is None else min(length, limit))

    def line_number(self, row: int) -> int:
        return self._columns["line"][row]

    def record(self, row: int) -> Record:
        """The trajectory of row ``row``; :class:`UnreadableRecord` for a broken line."""
        return parse_record(self.raw_line(row))

    def raw_preview(self, row: int) -> str:
        """The start of a line as text, for showing an unreadable one."""
        return self.raw_line(row, _RAW_PREVIEW_BYTES).decode("utf-8", errors="replace")

    def stats(self) -> dict[str, Any]:
        with self._lock:
            tail = self.torn_tail
            return {
                "path": str(self.path),
                "bytes": max(self._size, 0),
                "episodes": len(self) - self.unreadable,
                "unreadable": self.unreadable,
                "torn_tail": None if tail is None else {"line": tail.line, "bytes": tail.length,
                                                        "error": tail.error},
            }
