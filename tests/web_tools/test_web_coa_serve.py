"""The LLM steps of the web tools against ``coa serve`` (a real OpenAI-compatible server over
the tiny local model): page summaries and a multimodal call degrade to clear observations."""

from __future__ import annotations

import pytest

from coa_envs.tools.crawl_page import build as build_crawl
from coa_envs.types import ToolContext

pytestmark = pytest.mark.slow  # builds and serves the tiny model (~30 s on 2 cores)
pytest.importorskip("transformers", reason="needs the [llm] extra")
pytest.importorskip("fastapi", reason="needs the [serve] extra")
pytest.importorskip("uvicorn", reason="needs the [serve] extra")


@pytest.fixture(scope="module")
def served_tiny(tmp_path_factory):
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread
    from agents.tiny import build_tiny_model, save_tiny, train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer()
    directory = save_tiny(tmp_path_factory.mktemp("tiny"), tokenizer, build_tiny_model(tokenizer))
    engine = HFEngine(str(directory))
    with serve_in_thread(create_app(engine, engine.tokenizer, "tiny")) as url:
        yield url


def test_crawl_summary_through_coa_serve(site, served_tiny) -> None:
    tool = build_crawl("httpx", allow_hosts=["127.0.0.1"],
                       summary={"base_url": served_tiny, "model": "tiny", "max_tokens": 16, "max_input_chars": 300})
    result = tool.run(f"{site.url('/article.html')} | who founded it?", ToolContext())
    tool.close()
    assert result.ok
    page = result.details["pages"][0]
    # The tiny model's words are random, but the answer must have come back through the real
    # server, or the tool must say why it fell back to the page text.
    if page.get("summarised"):
        assert "Summary toward the goal:\n" in result.text
    else:
        assert "[summary unavailable (" in result.text and "Zephyr Falls Observatory" in result.text
