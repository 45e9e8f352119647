"""The mini-web generator and its HTTP server behave like the awkward web they stand in for."""

from __future__ import annotations

import json

import httpx
import pytest

from coa_envs.miniweb import (
    HUGE_PAGE_PATH,
    JS_PAGE_PATH,
    MISSING_PAGE_PATH,
    SLOW_PAGE_PATH,
    MiniWebServer,
    acquire_shared,
    build_site,
    make_world,
    release_shared,
    serve,
)
from coa_envs.miniweb.pdf import text_pdf
from coa_envs.miniweb.tasks import build_tasks


@pytest.fixture(scope="module")
def web():
    with serve(0, slow_delay_s=1.0) as server:
        yield server


@pytest.fixture(scope="module")
def http():
    with httpx.Client(trust_env=False, timeout=10) as client:
        yield client


def test_same_seed_same_world_other_seed_other_answers():
    assert make_world(0) == make_world(0)
    first = [t.gold for t in build_tasks(make_world(0), "http://x")]
    second = [t.gold for t in build_tasks(make_world(1), "http://x")]
    assert first == [t.gold for t in build_tasks(make_world(0), "http://x")]
    assert first != second


def test_every_link_on_every_page_resolves_except_the_deliberate_404():
    site = build_site(make_world(3))
    import re

    dead = set()
    for page in site.pages.values():
        if page.content_type.startswith("text/html"):
            for href in re.findall(rb'href="([^"]+)"', page.body):
                if href.decode() not in site.pages:
                    dead.add(href.decode())
    assert dead == {MISSING_PAGE_PATH}


def test_pages_articles_and_pdf(web, http):
    home = http.get(web.url("/"))
    assert home.status_code == 200 and web.site.world.institute in home.text
    pdf = http.get(web.url("/files/annual-report-2022.pdf"))
    assert pdf.headers["content-type"] == "application/pdf" and pdf.content.startswith(b"%PDF-")
    pypdf = pytest.importorskip("pypdf", reason="pip install pypdf (web extra)")
    import io

    text = pypdf.PdfReader(io.BytesIO(pdf.content)).pages[0].extract_text()
    report = next(r for r in web.site.world.reports if r.year == 2022)
    assert f"{report.visitors:,} visitors" in text


def test_redirect_chain_then_page(web, http):
    year = web.site.world.symposia[0].year
    first = http.get(web.url(f"/events/symposium-{year}.php"))
    assert first.status_code == 301
    second = http.get(web.url(first.headers["location"]))
    assert second.status_code == 302
    final = http.get(web.url(second.headers["location"]))
    assert final.status_code == 200 and web.site.world.symposia[0].city in final.text


def test_missing_page_is_a_real_404(web, http):
    assert http.get(web.url(MISSING_PAGE_PATH)).status_code == 404
    assert http.get(web.url("/no/such/page")).status_code == 404


def test_slow_page_outlasts_a_short_client_timeout(web):
    with httpx.Client(trust_env=False, timeout=0.2) as impatient, pytest.raises(httpx.ReadTimeout):
        impatient.get(web.url(SLOW_PAGE_PATH))


def test_huge_page_is_over_a_megabyte(web, http):
    body = http.get(web.url(HUGE_PAGE_PATH)).content
    assert len(body) > 1_000_000 and b"first entry was written in" in body[:2000]


def test_javascript_page_hides_its_text_from_plain_http(web, http):
    raw = http.get(web.url(JS_PAGE_PATH)).text
    assert str(web.site.world.buoy_wave_height_m) not in raw
    assert "String.fromCharCode" in raw


def test_search_export_lists_indexed_pages_without_their_answers(web):
    lines = [json.loads(line) for line in web.pages_jsonl.read_text().splitlines()]
    assert {"url", "title", "text"} == set(lines[0])
    by_url = {line["url"]: line for line in lines}
    assert all(url.startswith(web.base_url) for url in by_url)
    assert not any("/projects/" in url or url.endswith(".pdf") for url in by_url)  # walk-only
    for task in build_tasks(web.site.world, web.base_url, include_js=True):
        found_url = task.metadata["oracle_evidence"][0]
        assert found_url in by_url, task.task_id
        assert task.gold[0] not in by_url[found_url]["text"], task.task_id


def test_server_binds_loopback_only_and_stops_on_close():
    with pytest.raises(ValueError, match="loopback"):
        MiniWebServer(build_site(make_world(0)), host="0.0.0.0")
    with serve(0) as server:
        url = server.url("/")
        assert httpx.get(url, trust_env=False).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, trust_env=False, timeout=2)
    assert not server.pages_jsonl.exists()


def test_shared_server_is_reference_counted():
    first = acquire_shared(11)
    second = acquire_shared(11)
    assert first is second
    release_shared(first)
    assert not first.closed
    release_shared(second)
    assert first.closed
    third = acquire_shared(11)
    assert third is not first and not third.closed
    release_shared(third)


def test_handwritten_pdf_is_well_formed():
    data = text_pdf(["Hello (world)", "Ünïcode → ?"], title="T")
    assert data.startswith(b"%PDF-1.4") and data.rstrip().endswith(b"%%EOF")
    xref_at = int(data.rsplit(b"startxref\n", 1)[1].split(b"\n", 1)[0])
    assert data[xref_at:].startswith(b"xref")
