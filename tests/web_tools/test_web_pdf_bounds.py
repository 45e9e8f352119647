"""PDF text extraction is bounded by the document's content, not by what a hostile file asks for:
pages sharing one large compressed stream, many pages, and pages past the reading budget."""

from __future__ import annotations

import io
import zlib

import pytest

from coa_envs.web import extract as extract_module
from coa_envs.web.extract import MAX_PDF_PAGE_CONTENT_BYTES, ExtractionError, extract, pdf_text


def _text_stream(text: str, repeat: int = 1) -> bytes:
    return f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET\n".encode() * repeat


def _pdf(page_streams: list[int], streams: list[bytes]) -> bytes:
    """A PDF whose page i shows stream ``page_streams[i]`` (streams may be shared by pages)."""
    n_streams, n_pages = len(streams), len(page_streams)
    font = 3 + n_streams + n_pages
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{' '.join(f'{3 + n_streams + i} 0 R' for i in range(n_pages))}] "
               f"/Count {n_pages} >>".encode()]
    for raw in streams:
        packed = zlib.compress(raw, 9)
        objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed + b"\nendstream")
    for stream in page_streams:
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                       b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (3 + stream, font))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


@pytest.mark.timeout(120)
def test_pages_sharing_one_huge_stream_are_skipped_not_read() -> None:
    # 20 kB on the wire; each page showed 5 MB of text operators: more than 5 min of CPU before.
    bomb = _text_stream("A" * 200, repeat=5_000_000 // 230)
    data = _pdf([0, 1, 1, 1], [_text_stream("The launch was in 1957."), bomb])
    assert len(data) < 50_000
    page = extract(data, "application/pdf")
    assert "The launch was in 1957." in page.text
    for number in (2, 3, 4):
        assert f"[page {number} skipped: its content is larger than {MAX_PDF_PAGE_CONTENT_BYTES:,} bytes]" in page.text
    assert "AAAA" not in page.text


@pytest.mark.timeout(120)
def test_a_pdf_of_skipped_pages_only_says_why_it_has_no_text() -> None:
    bomb = _text_stream("B" * 200, repeat=5_000_000 // 230)
    with pytest.raises(ExtractionError, match=r"no extractable text.*\[page 1 skipped"):
        pdf_text(_pdf([0, 0], [bomb]))


def test_reading_stops_at_the_content_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extract_module, "MAX_PDF_CONTENT_BYTES", 150)
    streams = [_text_stream(f"fact number {i}") for i in range(5)]  # about 50 bytes each
    _, text = pdf_text(_pdf(list(range(5)), streams))
    assert "fact number 0" in text and "fact number 2" in text and "fact number 3" not in text
    assert "[stopped reading at page 4 of 5:" in text


def test_reading_stops_at_the_page_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extract_module, "MAX_PDF_PAGES", 2)
    _, text = pdf_text(_pdf([0, 0, 0, 0], [_text_stream("same page")]))
    assert text.count("same page") == 2 and text.endswith("[stopped reading after page 2 of 4]")


def test_an_ordinary_pdf_reads_as_before() -> None:
    from coa_envs.web.testing import make_pdf

    title, text = pdf_text(make_pdf(["First line.", "Second line."], title="Report"))
    assert title == "Report" and "[page 1]" in text and "First line." in text and "skipped" not in text
