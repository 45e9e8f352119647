"""The viewer on large files: indexing and paging keep memory far below the file size.

A generated run (about 5 kB a line, token ids, a torn line every 997) is indexed and paged
through the HTTP API under ``tracemalloc``; every page and the last episode come back with
the values the generator wrote. A few MB run by default; the 100 MB file the issue names is
the slow variant (``-m slow``).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the [serve] extra")
from fastapi.testclient import TestClient

from agents.viewer import ViewerData, create_app
from agents.viewer.testing import write_large_run


def _check_bounded(path: Path, info: dict) -> None:
    """Index and page ``path`` under tracemalloc; every page comes back; memory stays small."""
    size = path.stat().st_size
    tracemalloc.start()
    try:
        data = ViewerData([path.parent])
        index_peak = tracemalloc.get_traced_memory()[1]
        client = TestClient(create_app(data), base_url="http://127.0.0.1")
        assert client.get("/api/runs").status_code == 200  # the app's own start-up is not paging
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]  # imports of the web stack, the index itself
        total = client.get("/api/episodes", params={"limit": 1}).json()["total"]
        assert total == info["lines"]
        readable = client.get("/api/episodes", params={"has_ids": "yes", "limit": 1}).json()["total"]
        last = client.get("/api/episodes", params={"has_ids": "yes", "offset": readable - 1, "limit": 1}).json()
        last = last["rows"][0]
        episode = client.get("/api/episode", params={"run": 0, "file": 0, "row": last["row"]}).json()
        assert (episode["task_id"], episode["reward"]) == info["last"]
        solved = client.get("/api/episodes", params={"min_reward": 1, "sort": "reward", "limit": 500}).json()
        assert solved["total"] == info["rewards"] and len(solved["rows"]) == min(500, solved["total"])
        broken = client.get("/api/episodes", params={"status": "unreadable", "limit": 500}).json()
        assert broken["total"] == info["lines"] // 997
        query_peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()
    assert index_peak < size / 4 and query_peak < size / 4, (index_peak, query_peak, size)
    print(f"{size / 1e6:.1f} MB, {info['lines']} lines: index peak {index_peak / 1e6:.2f} MB, "
          f"paging peak {query_peak / 1e6:.2f} MB")


def test_a_few_megabytes_are_indexed_and_paged_in_bounded_memory(tmp_path):
    path = tmp_path / "big" / "trajectories.jsonl"
    _check_bounded(path, write_large_run(path, 4_000_000))


@pytest.mark.slow
def test_a_100_mb_file_is_indexed_and_paged_in_bounded_memory(tmp_path):
    path = tmp_path / "big" / "trajectories.jsonl"
    _check_bounded(path, write_large_run(path, 100_000_000))
