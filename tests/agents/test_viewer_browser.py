"""The viewer page in a real headless Chromium (Debian's, driven by Playwright).

The served page over real runs (``coa eval`` with the tiny model and with the oracle, the
showcase run with every span and every kind of bad line, a generated run for paging): it
loads, filters and pages, renders an episode with its role spans, reward and loss mask,
shows hostile model output as text, compares two runs side by side, and the static export
does the same from a file with no server. Screenshots go to ``tmp_path``; set
``COA_VIEWER_SCREENSHOTS=DIR`` to keep copies (the manual runs save them for review).
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.viewer.query import EpisodeQuery
from agents.viewer.testing import XSS_MARK, write_large_run, write_showcase_run
from coa_envs.web.browsers import find_chromium

pytestmark = pytest.mark.browser
pytest.importorskip("fastapi", reason="needs the [serve] extra")

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 60_000  # the first token view loads transformers; the machine may be busy


@pytest.fixture(scope="module")
def browser():
    executable = find_chromium("/usr/bin/chromium") or find_chromium()
    if executable is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_dir, tiny_tokenizer) -> list[Path]:
    from coa_cli.main import app

    root = tmp_path_factory.mktemp("viewer_runs")
    common = ["eval", "coa/SynthHop-v0", "--n", "3", "-k", "2", "--no-progress", "--no-plots"]
    for name, extra in (("before_sft", ["--model", str(tiny_dir), "--engine", "hf", "--max-new-tokens", "24",
                                        "--max-turns", "2"]), ("after_sft", ["--agent", "oracle"])):
        result = CliRunner().invoke(app, [*common, *extra, "--out", str(root / name)])
        assert result.exit_code == 0, result.output
    write_showcase_run(root / "showcase", tiny_tokenizer, tiny_dir)
    write_large_run(root / "many" / "trajectories.jsonl", 400_000)
    return [root / "before_sft", root / "after_sft", root / "showcase", root / "many"]


@pytest.fixture(scope="module")
def data(runs):
    from agents.viewer import ViewerData

    return ViewerData(runs)


@pytest.fixture(scope="module")
def base_url(data):
    from agents.server import serve_in_thread
    from agents.viewer import create_app

    with serve_in_thread(create_app(data)) as url:
        yield url.removesuffix("/v1") + "/"


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    opened.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    opened.on("pageerror", lambda error: problems.append(str(error)))
    yield opened
    context.close()
    assert problems == []  # no script error, no CSP violation, no failed request


def _shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    with open(path, "rb") as handle:
        header = handle.read(24)
    width, height = struct.unpack(">II", header[16:24])
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and width >= 1000 and height >= 600
    keep = os.environ.get("COA_VIEWER_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)
    return path


def _ready(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")


def _expect_count(page, total: int) -> None:
    words = "1 episode matches" if total == 1 else f"{total} episodes match"
    page.wait_for_function("words => document.querySelector('#list-summary').textContent === words", arg=words)


def _column(page, index: int) -> list[str]:
    return page.eval_on_selector_all(f"#episodes tbody tr td:nth-child({index})",
                                     "cells => cells.map(c => c.textContent)")


def test_page_loads_filters_sorts_and_pages(page, base_url, data, tmp_path):
    _ready(page, base_url)
    assert page.locator(".run-chip").count() == 4
    assert "1 unreadable line" in page.inner_text("#runs")
    everything = data.episodes(EpisodeQuery())["total"]
    _expect_count(page, everything)
    assert page.locator("#episodes tbody tr").count() == 50
    page.click("#pager button:has-text('next')")
    page.wait_for_function("() => document.querySelector('#pager').textContent.includes('51–100')")

    page.select_option("#filters [name=status]", "ok")
    _expect_count(page, data.episodes(EpisodeQuery(status="ok"))["total"])
    assert set(_column(page, 5)) == {"ok"}
    page.fill("#filters [name=min_reward]", "1")
    _expect_count(page, data.episodes(EpisodeQuery(status="ok", min_reward=1))["total"])
    assert set(_column(page, 4)) == {"1"}
    page.fill("#filters [name=task]", "MATH")
    _expect_count(page, data.episodes(EpisodeQuery(status="ok", min_reward=1, task="math"))["total"])
    assert _column(page, 2) == ["math-0001", "math-0001"]  # with ids and text only; math-0006 is an error

    page.click("#filters button[type=reset]")
    _expect_count(page, everything)
    page.select_option("#filters [name=run]", "2")
    page.select_option("#filters [name=tool_errors]", "some")
    _expect_count(page, 2)
    assert _column(page, 2) == ["math-0002", "math-0005"]
    page.select_option("#filters [name=tool_errors]", "")
    page.select_option("#filters [name=sort]", "tokens")
    page.select_option("#filters [name=order]", "desc")
    page.wait_for_function("() => document.querySelector('#episodes tbody td.task').textContent === 'math-0004'")
    tokens = [int(t) for t in _column(page, 7) if t != "—"]
    assert tokens == sorted(tokens, reverse=True)
    _shot(page, tmp_path, "viewer_list")


def test_episode_shows_role_spans_reward_and_loss_mask(page, base_url, data, tmp_path):
    row = data.episodes(EpisodeQuery(run=2, task_id="math-0001", has_ids="yes"))["rows"][0]
    _ready(page, f"{base_url}#e={row['key']}")
    episode = page.locator("#episode-pane .episode")
    episode.locator(".span-double_check").wait_for()
    tags = episode.locator(".turn .segment-generated .span").evaluate_all("nodes => nodes.map(n => n.dataset.tag)")
    assert tags == ["plan", "think", "code", "reflection", "suggested_answer", "double_check", "answer"]
    styles = {tag: episode.locator(f".span-{tag}").evaluate("n => getComputedStyle(n).borderLeftColor")
              for tag in ("plan", "think", "reflection", "suggested_answer", "double_check", "code")}
    assert len(set(styles.values())) == len(styles)  # every role (and the tool) looks different
    assert episode.locator(".span-observation .body").inner_text() == "391"
    assert "gold" in episode.locator("table.reward-details").inner_text()
    assert "reward 1" in episode.locator(".badges").inner_text()

    page.click("details.mask summary")
    page.wait_for_selector(".tok-generated .tok")
    blocks = data.tokens(2, 0, row["row"])["blocks"]
    assert [b["kind"] for b in blocks] == ["prompt", "generated", "observation", "generated"]
    assert episode.locator(".tok.loss").count() == blocks[1]["count"] + blocks[3]["count"]
    assert episode.locator(".tok-observation .tok.noloss").count() == blocks[2]["count"]
    assert episode.locator(".tok-prompt .tok.noloss").count() == blocks[0]["count"]
    first_turn = episode.locator(".tok-generated .toks").first.inner_text()
    assert first_turn.startswith("<plan>") and "print(17 * 23)" in first_turn
    _shot(page, tmp_path, "viewer_episode")


def test_hostile_model_output_is_shown_as_text(page, base_url, data):
    row = data.episodes(EpisodeQuery(run=2, task_id="math-0004"))["rows"][0]
    _ready(page, f"{base_url}#e={row['key']}")
    episode = page.locator("#episode-pane .episode")
    episode.locator(".span-think").wait_for()
    assert page.evaluate(f"typeof window.{XSS_MARK}") == "undefined"
    assert f'<img src=x onerror="window.{XSS_MARK}=1">' in episode.locator(".span-think .body").inner_text()
    assert episode.locator("img, iframe, script, a[href]").count() == 0
    assert "<b>bold</b>" in episode.locator(".answer").inner_text()


def test_unreadable_lines_and_text_only_episodes_display(page, base_url, data):
    _ready(page, base_url)
    page.select_option("#filters [name=status]", "unreadable")
    _expect_count(page, data.episodes(EpisodeQuery(status="unreadable"))["total"])
    page.click("#episodes tbody tr >> nth=0")
    page.wait_for_selector(".episode.unreadable")
    assert "not valid JSON" in page.inner_text(".episode.unreadable")
    text_only = data.episodes(EpisodeQuery(run=1))["rows"][0]
    page.goto(f"{base_url}#e={text_only['key']}")
    page.reload()
    page.wait_for_selector(".mask-text")
    assert "no token ids" in page.inner_text(".mask-text")


def test_two_runs_side_by_side_on_the_same_task(page, base_url, tmp_path):
    _ready(page, base_url)
    page.click("button[data-tab='compare']")
    page.select_option("#compare-form [name=a]", "0")
    page.select_option("#compare-form [name=b]", "1")
    page.wait_for_function("() => document.querySelectorAll('#pairs tbody tr').length === 3")
    assert page.inner_text("#compare-summary").startswith("3 tasks in both runs")
    page.click("#pairs tbody tr >> nth=0")
    left, right = page.locator("#pane-a .episode"), page.locator("#pane-b .episode")
    left.wait_for()
    right.wait_for()
    assert left.locator("h2").inner_text() == right.locator("h2").inner_text()  # the same task
    assert "before_sft" in page.inner_text("#pane-a .samples") and "after_sft" in page.inner_text("#pane-b .samples")
    assert "reward 1" in right.locator(".badges").inner_text()
    assert right.locator(".span-wiki_search").count() >= 1 and right.locator(".span-answer").count() == 1
    first = right.get_attribute("data-key")
    page.click("#pane-b .samples button:has-text('1')")
    page.wait_for_function("k => document.querySelector('#pane-b .episode')?.dataset.key !== k", arg=first)
    _shot(page, tmp_path, "viewer_compare")


def test_static_export_works_from_a_file_without_a_server(page, data, tmp_path):
    from agents.viewer import export_html

    result = export_html(data, tmp_path / "share.html", EpisodeQuery(env="coa/SynthHop-v0"), max_episodes=40)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    _ready(page, Path(result.path).as_uri())
    assert f"{result.included} of {result.matched}" in page.inner_text("#banner")
    _expect_count(page, result.included)
    page.select_option("#filters [name=run]", "1")
    _expect_count(page, 6)
    page.click("#episodes tbody tr >> nth=0")
    page.wait_for_selector("#episode-pane .span-answer")
    page.click("button[data-tab='compare']")
    page.wait_for_function("() => document.querySelectorAll('#pairs tbody tr').length === 3")
    page.click("#pairs tbody tr >> nth=1")
    page.wait_for_selector("#pane-b .episode")
    page.click("#tabs button[data-tab='episodes']")
    page.select_option("#filters [name=run]", "0")
    page.click("#episodes tbody tr >> nth=0")
    page.click("details.mask summary")
    page.wait_for_selector(".tok-generated .tok")
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    _shot(page, tmp_path, "viewer_export")
