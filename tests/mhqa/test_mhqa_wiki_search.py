"""The wiki_search tool never raises: every bad input or outage becomes a clear observation."""

from __future__ import annotations

import pickle
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from coa_envs.retrieval import RetrievalIndexError
from coa_envs.tools import wiki_search
from coa_envs.types import ErrorKind, Task, ToolContext


@pytest.fixture
def tool(small_index):
    return wiki_search.build("bm25", index=str(small_index))


def test_backends_and_default_top_k_of_three(tool):
    assert wiki_search.BACKENDS == ("bm25", "dense", "remote")
    result = tool.run("river", ToolContext())
    assert result.ok and result.text.count("Doc ") == 3
    assert result.text.startswith("Doc 1 (Title: ")
    assert result.details["hits"][0]["title"] in {"Danube", "Volga"}


def test_passages_are_rendered_with_numbered_titles(tool):
    text = wiki_search.build("bm25", index=tool._options["index"], top_k=1).run("Darwin Beagle").text
    assert text == (
        "Doc 1 (Title: Charles Darwin)\nCharles Darwin sailed on HMS Beagle and wrote On the Origin of Species."
    )


def test_empty_query_is_a_bad_action(tool):
    result = tool.run("   \n ", ToolContext())
    assert not result.ok and result.error_kind == ErrorKind.BAD_ACTION
    assert "non-empty query" in result.text


def test_ten_kilobyte_query_is_cut_and_still_searched(tool):
    result = tool.run("Tokyo Japan capital " * 500, ToolContext())
    assert result.ok and "only the first 1000 were searched" in result.text
    assert "Title: Tokyo" in result.text


def test_non_ascii_query(tool):
    result = tool.run("東京", ToolContext())
    assert result.ok and "Title: Tokyo" in result.text


def test_query_matching_nothing_says_so(tool):
    result = tool.run("qwxzv zzkq", ToolContext())
    assert result.ok and result.details["no_match"] is True
    assert result.text.startswith('No passages matched "qwxzv zzkq"')


def test_without_any_index_the_tool_explains_it_is_not_configured(monkeypatch):
    monkeypatch.delenv(wiki_search.INDEX_ENV_VAR, raising=False)
    result = wiki_search.build("bm25").run("anything", ToolContext())
    assert not result.ok and result.error_kind == ErrorKind.NOT_CONFIGURED
    assert "coa retriever build-index" in result.text and "COA_WIKI_INDEX" in result.text


def test_index_from_environment_variable_and_from_the_task(small_index, monkeypatch):
    monkeypatch.setenv(wiki_search.INDEX_ENV_VAR, str(small_index))
    assert "Title: Petra" in wiki_search.build("bm25").run("Petra Jordan", ToolContext()).text
    monkeypatch.setenv(wiki_search.INDEX_ENV_VAR, "/nonexistent/index")
    task = Task("t", "q", metadata={"wiki_index": str(small_index)})
    assert "Title: Petra" in wiki_search.build("bm25").run("Petra Jordan", ToolContext(task=task)).text
    broken = wiki_search.build("bm25").run("Petra", ToolContext())
    assert broken.error_kind == ErrorKind.NOT_CONFIGURED and "/nonexistent/index" in broken.text


def test_a_named_index_that_does_not_exist_fails_at_make_time(tmp_path):
    with pytest.raises(RetrievalIndexError, match="build-index"):
        wiki_search.build("bm25", index=str(tmp_path / "missing"))


def test_unknown_options_and_backends_fail_at_make_time(small_index):
    with pytest.raises(TypeError, match="unknown options"):
        wiki_search.build("bm25", index=str(small_index), url="http://x")
    with pytest.raises(ValueError, match="unknown backend"):
        wiki_search.build("google")


def test_server_down_gives_a_tool_timeout_observation():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tool = wiki_search.build(
        "remote", url=f"http://127.0.0.1:{port}/retrieve", timeout_s=0.5, retries=1, backoff_s=0.01
    )
    result = tool.run("anything", ToolContext())
    assert not result.ok and result.error_kind == ErrorKind.TOOL_TIMEOUT
    assert "2 attempt(s)" in result.text
    tool.close()


def test_tool_pickles_and_works_after_unpickling(tool):
    clone = pickle.loads(pickle.dumps(tool))
    assert clone.run("Bizet Carmen").text == tool.run("Bizet Carmen").text


def test_tool_is_safe_to_share_between_threads(tool):
    queries = ["Eiffel", "Budapest", "Volga Caspian", "Petra", "Darwin"] * 20
    expected = [tool.run(q).text for q in queries]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda q: tool.run(q).text, queries)) == expected


@pytest.mark.parametrize(
    ("query", "error_kind", "expected"),
    [
        ("", "bad_action", "is empty"),  # caught by the protocol before the tool
        ("Tokyo Japan capital " * 500, None, "Title: Tokyo"),  # ~10 kB
        ("東京", None, "Title: Tokyo"),
        ("München Isar", None, "Title: München"),
        ("qwxzv zzkq", None, "No passages matched"),
        ("\x00\x01 ☃ 🙂", None, "No passages matched"),
    ],
)
def test_bad_queries_through_the_env_become_observations(small_index, query, error_kind, expected):
    import gymnasium as gym

    env = gym.make("coa/NQ-v1", tools={"wiki_search": {"index": str(small_index)}})
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(f"<wiki_search>{query}</wiki_search>")
    assert info["error_kind"] == error_kind and expected in observation
    assert not (terminated or truncated) and reward == 0.0
    env.close()
