"""Turn a fetched body into readable text, by what the body really is.

The declared content type is a hint, not a fact: servers label PDFs as octet-stream and
HTML as text/plain. We sniff magic bytes first, then decode text with the declared
charset, the HTML ``<meta charset>``, a BOM, UTF-8, and finally charset detection.
HTML goes through trafilatura (main-content extraction) with readability-lxml and plain
lxml text as fallbacks, plus the page's outgoing links (agents that walk a site, as in
WebWalkerQA, need them). PDFs go through pypdf. Bodies that are not text (images,
archives, random bytes) raise :class:`ExtractionError` with a message fit for the model.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

__all__ = ["MAX_LINK_CHARS", "MAX_MAIN_CONTENT_CHARS", "MAX_MAIN_CONTENT_ELEMENTS", "MAX_TITLE_CHARS", "ExtractedPage",
           "ExtractionError", "cut_text", "decode_text", "extract", "html_links", "looks_binary", "pdf_text"]

MAX_MAIN_CONTENT_ELEMENTS = 25_000  # larger pages are shown as plain text (see _html_page)
MAX_MAIN_CONTENT_CHARS = 2_000_000
MAX_TITLE_CHARS = 300
MAX_LINK_CHARS = 2_000  # longer URLs are left out of a page's links
MAX_PDF_PAGES = 200  # a PDF's pages past these are not read (see _pdf_pages)
MAX_PDF_PAGE_CONTENT_BYTES = 1_000_000
MAX_PDF_CONTENT_BYTES = 3_000_000

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+)""", re.I)
_BINARY_MAGIC = {
    b"\x89PNG": "PNG image",
    b"\xff\xd8\xff": "JPEG image",
    b"GIF8": "GIF image",
    b"PK\x03\x04": "ZIP archive (or Office document)",
    b"\x1f\x8b": "gzip archive",
    b"ID3": "MP3 audio",
    b"RIFF": "RIFF media (WAV/WebP/AVI)",
    b"\x7fELF": "executable",
}


class ExtractionError(Exception):
    """The body cannot be shown as text; ``str(exc)`` says why, for the observation."""


@dataclass(frozen=True, slots=True)
class ExtractedPage:
    """Readable text of one document. ``kind`` is ``html``, ``pdf`` or ``text``."""

    kind: str
    title: str
    text: str
    links: tuple[tuple[str, str], ...] = ()
    note: str = ""  # how the text was obtained when it is not the usual way (shown to the model)


def looks_binary(data: bytes) -> bool:
    sample = data[:4096]
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    control = sum(1 for b in sample if b < 9 or 13 < b < 32)
    return control / len(sample) > 0.05


# Python codecs that are no page encoding and decode in time quadratic in the body: a page labelled
# charset=punycode (in its header or a <meta>) held a crawl for minutes (80 kB: 2 s, 3 MB: ~13 min).
_NOT_PAGE_CHARSETS = frozenset({"punycode", "idna"})


def _page_charset(name: str) -> bool:
    """Whether ``name`` is a text encoding a page may declare (browsers ignore other labels too)."""
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError, TypeError):
        return False
    return info.name not in _NOT_PAGE_CHARSETS and getattr(info, "_is_text_encoding", True)


def decode_text(data: bytes, declared: str | None = None) -> str:
    """Decode ``data`` with the first charset that works, in order of trustworthiness."""
    candidates: list[str] = []
    for bom, name in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                      (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            candidates.append(name)
    if declared:
        candidates.append(declared)
    match = _META_CHARSET.search(data[:4096])
    if match:
        candidates.append(match.group(1).decode("ascii", "ignore"))
    candidates.append("utf-8")
    for name in candidates:
        if not _page_charset(name):
            continue
        try:
            return data.decode(name)
        except (LookupError, UnicodeError, ValueError):
            continue
    try:
        from charset_normalizer import from_bytes

        best = from_bytes(data[:200_000]).best()
        if best is not None and best.encoding:
            return data.decode(best.encoding, errors="replace")
    except ImportError:
        pass
    return data.decode("cp1252", errors="replace")


def _parse_html(html: str) -> Any:
    """The lxml tree of ``html`` (linear in its size), or None when lxml cannot read it."""
    from lxml import html as lxml_html

    try:
        return lxml_html.fromstring(html)
    except (ValueError, lxml_html.etree.ParserError):
        return None


def html_links(html: str, base_url: str, limit: int = 50) -> tuple[tuple[str, str], ...]:
    """Outgoing http(s) links as ``(anchor text, absolute URL)``, first occurrence order."""
    tree = _parse_html(html)
    return () if tree is None else _tree_links(tree, base_url, limit)


def _tree_links(tree: Any, base_url: str, limit: int) -> tuple[tuple[str, str], ...]:
    links: dict[str, str] = {}
    for anchor in tree.iter("a"):
        href = (anchor.get("href") or "").strip()
        if not href or href.startswith(("#", "javascript:", "mailto:", "tel:")):
            continue
        absolute = urljoin(base_url, href).split("#", 1)[0]
        # A URL longer than browsers keep is no link to follow, and each one listed would carry
        # its length into the observation past max_chars (a page of 25 links of 100 kB each).
        if len(absolute) > MAX_LINK_CHARS or urlsplit(absolute).scheme not in ("http", "https") or absolute in links:
            continue
        links[absolute] = " ".join(anchor.text_content().split())[:120]
        if len(links) >= limit:
            break
    return tuple((text, url) for url, text in links.items())


def cut_text(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _short(text: str, limit: int) -> str:
    return cut_text(" ".join(text.split()), limit)


def _tree_title(tree: Any) -> str:
    """The first ``<title>``, read by the parser (a regex search for ``<title ... </title>`` took
    time quadratic in the page: 8,000 unclosed ``<title>`` tags cost 5 s, a 900 kB page of them
    20 minutes), cut to :data:`MAX_TITLE_CHARS` (the header is not cut with the page text)."""
    if tree is None:
        return ""
    title = next(tree.iter("title"), None)
    return "" if title is None else _short(title.text_content(), MAX_TITLE_CHARS)


def _plain_text(tree: Any) -> str:
    """Every text node but scripts and styles: linear in the page, the last fallback."""
    if tree is None:
        return ""
    for bad in tree.xpath("//script|//style|//noscript"):
        bad.drop_tree()
    return "\n".join(line.strip() for line in tree.text_content().splitlines() if line.strip())


def _main_content(html: str, url: str) -> str:
    """trafilatura's main content, readability's where trafilatura finds none, or ""."""
    import trafilatura

    text = trafilatura.extract(
        html, url=url or None, include_comments=False, include_tables=True,
        favor_recall=True, deduplicate=False, fast=True,  # fast: skip justext (slow); readability below
    )
    if text and text.strip():
        return text.strip()
    try:  # readability keeps pages trafilatura judges to have no main content
        from lxml import html as lxml_html
        from readability import Document

        summary = Document(html).summary(html_partial=True)
        text = lxml_html.fromstring(summary).text_content()
        return "\n".join(line.strip() for line in text.splitlines() if line.strip())
    except Exception:  # readability raises bare Exceptions on odd markup
        return ""


def _html_page(html: str, url: str, max_links: int) -> ExtractedPage:
    """Title, links and text of one HTML document, in time bounded by the page's size.

    Main-content extraction costs about 0.1 ms of CPU per element (a 900 kB page of 100,000
    ``<p>`` took 10 s, a 3 MB one 35 s, none of it bounded by the crawl's ``timeout_s``), so
    a page larger than :data:`MAX_MAIN_CONTENT_ELEMENTS` elements or
    :data:`MAX_MAIN_CONTENT_CHARS` characters is shown as its plain text instead, with a note
    saying so. A count, not a clock: the same page gives the same text on a busy machine.
    """
    tree = _parse_html(html)
    title = _tree_title(tree)
    links = _tree_links(tree, url, max_links) if tree is not None and max_links > 0 else ()
    elements = 0 if tree is None else sum(1 for _ in tree.iter())
    if elements > MAX_MAIN_CONTENT_ELEMENTS or len(html) > MAX_MAIN_CONTENT_CHARS:
        note = (f"main-content extraction skipped: the page has {elements:,} elements and {len(html):,} "
                f"characters (at most {MAX_MAIN_CONTENT_ELEMENTS:,} and {MAX_MAIN_CONTENT_CHARS:,}); "
                "showing all of its text")
        return ExtractedPage("html", title, _plain_text(tree), links, note)
    return ExtractedPage("html", title, _main_content(html, url) or _plain_text(tree), links)


def _pdf_limits() -> Any:
    """pypdf's decompression caps lowered to what one page may hold (pypdf >= 6 lets a caller set
    them for its own context; older releases keep their own 75 MB caps)."""
    import pypdf

    apply = getattr(pypdf, "apply_configuration", None)
    if apply is None:
        return contextlib.nullcontext()
    cap = MAX_PDF_PAGE_CONTENT_BYTES + 1
    return apply(zlib_maximum_output_length=cap, lzw_maximum_output_length=cap,
                 run_length_maximum_output_length=cap, brotli_maximum_output_length=cap)


def _pdf_pages(reader: Any) -> Iterator[tuple[str, bool]]:
    """Each page's text (``(text, True)``), or a note where a page was skipped or reading stopped.

    Text extraction costs CPU superlinear in a page's content (1 MB 1.5 s, 4 MB 14 s), and pages
    may share one stream: a 20 kB PDF of three pages showing one compressed 5 MB stream ran past
    five minutes. So a page whose content is larger than :data:`MAX_PDF_PAGE_CONTENT_BYTES` is
    skipped, and reading stops after :data:`MAX_PDF_PAGES` pages or
    :data:`MAX_PDF_CONTENT_BYTES` of content, each said in the text.
    """
    from pypdf.errors import LimitReachedError

    total, spent = len(reader.pages), 0
    for index in range(min(total, MAX_PDF_PAGES)):
        page = reader.pages[index]
        try:
            contents = page.get_contents()
            size = 0 if contents is None else len(contents.get_data())
        except LimitReachedError:
            size = MAX_PDF_PAGE_CONTENT_BYTES + 1
        if size > MAX_PDF_PAGE_CONTENT_BYTES:
            yield f"[page {index + 1} skipped: its content is larger than {MAX_PDF_PAGE_CONTENT_BYTES:,} bytes]", False
            continue
        if spent + size > MAX_PDF_CONTENT_BYTES:
            yield (f"[stopped reading at page {index + 1} of {total}: the pages before it hold "
                   f"{spent:,} bytes of content, at most {MAX_PDF_CONTENT_BYTES:,} are read]"), False
            return
        spent += size
        text = (page.extract_text() or "").strip()
        if text:
            yield f"[page {index + 1}]\n{text}", True
    if total > MAX_PDF_PAGES:
        yield f"[stopped reading after page {MAX_PDF_PAGES} of {total}]", False


def pdf_text(data: bytes) -> tuple[str, str]:
    """Title and text of a PDF, read in time bounded by the limits of :func:`_pdf_pages`."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError, PyPdfError

    try:
        with _pdf_limits():
            reader = PdfReader(io.BytesIO(data))
            title = ""
            if reader.metadata is not None and reader.metadata.title:
                title = _short(str(reader.metadata.title), MAX_TITLE_CHARS)
            parts = list(_pdf_pages(reader))
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ExtractionError(f"the PDF could not be read ({type(exc).__name__}: {exc})") from exc
    if not any(is_text for _, is_text in parts):
        notes = [note for note, _ in parts]
        raise ExtractionError(" ".join(["the PDF has no extractable text (scanned images only?)", *notes[:3],
                                        *([f"(and {len(notes) - 3} more notes)"] if len(notes) > 3 else [])]))
    return title, "\n\n".join(part for part, _ in parts)


def _sniff_kind(data: bytes, content_type: str) -> str:
    head = data[:1024].lstrip().lower()
    if data.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith((b"<!doctype html", b"<html", b"<head", b"<body")) or b"<html" in head:
        return "html"
    for magic, label in _BINARY_MAGIC.items():
        if data.startswith(magic):
            return f"binary:{label}"
    if content_type in ("text/html", "application/xhtml+xml"):
        return "html"
    if content_type == "application/pdf":
        return "pdf"
    if looks_binary(data):
        return f"binary:{content_type or 'unknown type'}"
    return "text"


def extract(
    data: bytes,
    content_type: str = "",
    charset: str | None = None,
    url: str = "",
    *,
    max_links: int = 50,
) -> ExtractedPage:
    """Extract text from one response body; raise :class:`ExtractionError` for non-text."""
    if not data.strip():
        raise ExtractionError("the page is empty")
    kind = _sniff_kind(data, content_type)
    if kind == "pdf":
        title, text = pdf_text(data)
        return ExtractedPage("pdf", title, text)
    if kind.startswith("binary:"):
        raise ExtractionError(
            f"the content is binary ({kind.split(':', 1)[1]}, {len(data)} bytes) and cannot be shown as text"
        )
    text = decode_text(data, charset)
    if kind == "html":
        return _html_page(text, url, max_links)
    return ExtractedPage("text", "", text.strip())
