"""The Search-R1 HTTP API: our server answers it, our client speaks it, and a server that is
down or silent becomes a bounded, retried failure instead of a hang."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("fastapi", reason="the retrieval server needs the [serve] extra")
pytest.importorskip("uvicorn", reason="the retrieval server needs the [serve] extra")

from coa_envs.retrieval import RetrieverUnavailable, open_retriever
from coa_envs.retrieval.remote import RemoteRetriever
from coa_envs.retrieval.server import serve_in_thread


@pytest.fixture(scope="module")
def server(small_index):
    local = open_retriever("bm25", index=str(small_index))
    with serve_in_thread(local) as url:
        yield url, local


def test_server_speaks_the_search_r1_wire_format(server):
    url, _ = server
    body = {"queries": ["capital of Hungary", "Beagle"], "topk": 2, "return_scores": True}
    result = httpx.post(f"{url}/retrieve", json=body, timeout=5).json()["result"]
    assert len(result) == 2 and len(result[0]) == 2
    first = result[0][0]
    assert set(first) == {"document", "score"} and set(first["document"]) == {"id", "contents"}
    assert first["document"]["contents"].startswith("Budapest\n")
    plain = httpx.post(f"{url}/retrieve", json={**body, "return_scores": False}, timeout=5).json()
    assert plain["result"][1][0] == {"id": "6", "contents": result[1][0]["document"]["contents"]}


def test_server_rejects_bad_requests_with_422(server):
    url, _ = server
    assert httpx.post(f"{url}/retrieve", json={"queries": [], "topk": 3}, timeout=5).status_code == 422
    assert httpx.post(f"{url}/retrieve", json={"queries": ["x"], "topk": 0}, timeout=5).status_code == 422
    assert httpx.post(f"{url}/retrieve", json={"queries": ["x", 3]}, timeout=5).status_code == 422
    assert httpx.post(f"{url}/retrieve", json={"queries": ["x"], "topk": True}, timeout=5).status_code == 422
    garbage = httpx.post(f"{url}/retrieve", content=b"{not json", timeout=5)
    assert garbage.status_code == 422 and "json" in garbage.json()["detail"]
    assert httpx.get(f"{url}/health", timeout=5).json()["num_docs"] == 10


def test_remote_client_matches_in_process_search(server):
    url, local = server
    client = RemoteRetriever(url)
    queries = ["first Nobel Prize in Physics", "東京", "qwxzv", "river Europe Caspian"]
    remote_hits = client.search(queries, k=3)
    local_hits = local.search(queries, k=3)
    assert [[h.passage for h in row] for row in remote_hits] == [[h.passage for h in row] for row in local_hits]
    assert remote_hits[2] == []
    client.close()


def test_concurrent_requests_are_batched_and_answered_correctly(server):
    url, local = server
    client = RemoteRetriever(url)
    queries = ["Carmen", "Petra Jordan", "Isar Bavaria", "Eiffel"] * 16
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda q: client.search([q], k=1)[0][0].passage.title, queries))
    assert got == [local.search([q], k=1)[0][0].passage.title for q in queries]
    client.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_server_down_fails_after_configured_retries():
    client = RemoteRetriever(f"http://127.0.0.1:{_free_port()}", timeout_s=1, retries=2, backoff_s=0.01)
    with pytest.raises(RetrieverUnavailable, match=r"3 attempt\(s\).*could not connect"):
        client.search(["anything"])


def test_silent_server_times_out_instead_of_hanging():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_say_nothing() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept_and_say_nothing, daemon=True)
    thread.start()
    try:
        client = RemoteRetriever(
            f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.3, retries=1, backoff_s=0.01
        )
        with pytest.raises(RetrieverUnavailable, match="timed out"):
            client.search(["anything"])
        assert len(accepted) == 2  # the first try and one retry
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def test_client_validates_its_configuration():
    with pytest.raises(ValueError, match="http"):
        RemoteRetriever("ftp://example")
    with pytest.raises(ValueError, match="retries"):
        RemoteRetriever("http://127.0.0.1:1", retries=-1)


def test_cli_serve_builds_an_index_from_the_corpus_and_answers_until_stopped(small_corpus, tmp_path, monkeypatch):
    """`coa retriever serve --corpus … --backend bm25`: no index given, one is built in the cache."""
    import os
    import subprocess
    import sys

    from coa_cli.retriever import default_index_dir

    port = _free_port()
    env = {**os.environ, "COA_CACHE_DIR": str(tmp_path)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coa_cli.main",
            "retriever",
            "serve",
            "--corpus",
            str(small_corpus),
            "--backend",
            "bm25",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        client = RemoteRetriever(f"http://127.0.0.1:{port}", timeout_s=2, retries=0)
        for _ in range(150):
            try:
                hits = client.search(["Budapest Hungary"], k=1)
                break
            except RetrieverUnavailable:
                if process.poll() is not None:
                    pytest.fail(process.stdout.read().decode())
                time.sleep(0.1)
        else:
            pytest.fail("coa retriever serve did not come up")
        assert hits[0][0].passage.title == "Budapest"
        monkeypatch.setenv("COA_CACHE_DIR", str(tmp_path))
        built = default_index_dir(small_corpus, "bm25")
        assert built.parent == tmp_path / "indexes" and (built / "coa_index.json").is_file()
    finally:
        process.terminate()
        process.wait(timeout=10)


class _SlowCountingRetriever:
    """The real bm25 retriever, slowed down so concurrent requests pile up, recording batch sizes."""

    backend = "bm25"

    def __init__(self, inner):
        self.inner, self.batch_sizes = inner, []

    def search(self, queries, k=3):
        self.batch_sizes.append(len(queries))
        time.sleep(0.05)
        return self.inner.search(queries, k)

    def close(self):
        pass


def test_queued_requests_share_one_search_call(small_index):
    counting = _SlowCountingRetriever(open_retriever("bm25", index=str(small_index)))
    with serve_in_thread(counting) as url:
        client = RemoteRetriever(url, timeout_s=10)
        queries = ["Carmen", "Petra", "Isar", "Eiffel", "Beagle", "Volga", "Tokyo", "Budapest"] * 3
        with ThreadPoolExecutor(24) as pool:
            titles = list(pool.map(lambda q: client.search([q], k=1)[0][0].passage.title, queries))
        client.close()
    assert titles == [counting.inner.search([q], k=1)[0][0].passage.title for q in queries]
    assert sum(counting.batch_sizes) == len(queries)
    assert len(counting.batch_sizes) < len(queries) and max(counting.batch_sizes) > 1


def test_retries_wait_with_configured_exponential_backoff(monkeypatch):
    import coa_envs.retrieval.remote as remote

    waits: list[float] = []
    monkeypatch.setattr(remote.time, "sleep", waits.append)
    client = RemoteRetriever(
        f"http://127.0.0.1:{_free_port()}", timeout_s=1, retries=4, backoff_s=0.25, max_backoff_s=1.0
    )
    with pytest.raises(RetrieverUnavailable, match=r"5 attempt\(s\)"):
        client.search(["anything"])
    assert waits == [0.25, 0.5, 1.0, 1.0]


def test_wrong_url_is_a_tool_error_and_is_not_retried(server, monkeypatch):
    import coa_envs.retrieval.remote as remote
    from coa_envs.tools import wiki_search
    from coa_envs.types import ErrorKind, ToolContext

    waits: list[float] = []
    monkeypatch.setattr(remote.time, "sleep", waits.append)
    url, _ = server
    tool = wiki_search.build("remote", url=f"{url}/v2/retrieve", retries=3)
    result = tool.run("Budapest", ToolContext())
    assert not result.ok and result.error_kind == ErrorKind.TOOL_ERROR and "HTTP 404" in result.text
    assert waits == []
    tool.close()


class _SlowRetriever:
    """The real bm25 retriever behind a server that answers after ``delay_s``."""

    backend = "bm25"

    def __init__(self, inner, delay_s):
        self.inner, self.delay_s = inner, delay_s

    def search(self, queries, k=3):
        time.sleep(self.delay_s)
        return self.inner.search(queries, k)

    def close(self):
        pass


def test_slow_server_gives_a_tool_timeout_step_and_the_episode_goes_on(small_index):
    import gymnasium as gym

    slow = _SlowRetriever(open_retriever("bm25", index=str(small_index)), delay_s=0.8)
    with serve_in_thread(slow) as url:
        tools = {"wiki_search": {"backend": "remote", "url": url, "timeout_s": 0.2, "retries": 1, "backoff_s": 0.01}}
        env = gym.make("coa/NQ-v1", tools=tools)
        env.reset(seed=0)
        observation, reward, terminated, truncated, info = env.step("<wiki_search>Budapest</wiki_search>")
        assert info["error_kind"] == "tool_timeout" and not (terminated or truncated) and reward == 0.0
        assert "timed out" in observation and "2 attempt(s)" in observation
        _, _, terminated, _, info = env.step("<answer>Wilhelm Conrad Röntgen</answer>")
        assert terminated and info["error_kind"] is None
        env.close()
    # A patient client gets the real answer from the same slow server.
    with serve_in_thread(slow) as url:
        assert RemoteRetriever(url, timeout_s=5).search(["Budapest"], k=1)[0][0].passage.title == "Budapest"
