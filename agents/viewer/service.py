"""The viewer's state and operations, independent of HTTP: the server and the export share it.

Runs are addressed by their position on the command line and episodes by
``(run, file, row)`` integers, never by a path, so no request parameter can name a file
(no path traversal by construction). Every operation refreshes the indexes it reads, so a
run that is still being written shows its new episodes on the next page load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.viewer.episode import episode_payload, unreadable_payload
from agents.viewer.index import FileIndex, Vocabs
from agents.viewer.query import CompareQuery, EpisodeQuery, compare_runs, select_episodes
from agents.viewer.records import UnreadableRecord
from agents.viewer.runs import Run, open_runs
from agents.viewer.tokens import TokenizerCache, token_view

__all__ = ["EpisodeNotFound", "ViewerData"]


class EpisodeNotFound(LookupError):
    """A run, file or row number that does not exist (the HTTP layer answers 404)."""


class ViewerData:
    """Indexed runs plus the tokenizers that decode them."""

    def __init__(self, paths: list[str | Path], tokenizer: str | None = None) -> None:
        self.vocabs = Vocabs.new()
        self.runs: list[Run] = open_runs(paths, self.vocabs, tokenizer)
        self.tokenizers = TokenizerCache()

    # -- lookups ---------------------------------------------------------------------------
    def _run(self, run: int) -> Run:
        if not 0 <= run < len(self.runs):
            raise EpisodeNotFound(f"run {run} does not exist (runs 0..{len(self.runs) - 1})")
        return self.runs[run]

    def _file(self, run: int, file: int) -> FileIndex:
        files = self._run(run).files
        if not 0 <= file < len(files):
            raise EpisodeNotFound(f"run {run} has no file {file} (files 0..{len(files) - 1})")
        files[file].refresh()
        return files[file]

    # -- operations ------------------------------------------------------------------------
    def runs_info(self) -> list[dict[str, Any]]:
        for run in self.runs:
            run.refresh()
        return [run.info(number) for number, run in enumerate(self.runs)]

    def episodes(self, query: EpisodeQuery) -> dict[str, Any]:
        if query.run is not None:
            self._run(query.run).refresh()
        else:
            for run in self.runs:
                run.refresh()
        return select_episodes(self.runs, self.vocabs, query)

    def compare(self, query: CompareQuery) -> dict[str, Any]:
        for number in (query.a, query.b):
            self._run(number).refresh()
        return compare_runs(self.runs, self.vocabs, query)

    def episode(self, run: int, file: int, row: int) -> dict[str, Any]:
        index = self._file(run, file)
        if not 0 <= row < len(index):
            raise EpisodeNotFound(f"run {run} file {file} has no row {row} ({len(index)} rows)")
        key, line = f"{run}.{file}.{row}", index.line_number(row)
        source = f"{self.runs[run].label}: {index.path.name}:{line}"
        try:
            return episode_payload(index.record(row), key, line, source)
        except UnreadableRecord as exc:
            return unreadable_payload(key, line, source, str(exc), index.raw_preview(row))

    def tokens(self, run: int, file: int, row: int) -> dict[str, Any]:
        index = self._file(run, file)
        if not 0 <= row < len(index):
            raise EpisodeNotFound(f"run {run} file {file} has no row {row} ({len(index)} rows)")
        try:
            record = index.record(row)
        except UnreadableRecord as exc:
            return {"blocks": [], "total": 0, "shown": 0, "trained": 0, "decoded": False,
                    "tokenizer_error": None, "error": str(exc)}
        tokenizer, error = (None, None)
        if any(s.token_ids for s in record.trajectory.segments) or record.trajectory.prompt_ids:
            tokenizer, error = self.tokenizers.get(self.runs[run].tokenizer)
        return token_view(record.trajectory, tokenizer, error)
