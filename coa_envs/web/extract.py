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
import io
import re
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

__all__ = ["ExtractedPage", "ExtractionError", "decode_text", "extract", "html_links", "looks_binary", "pdf_text"]

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


def looks_binary(data: bytes) -> bool:
    sample = data[:4096]
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    control = sum(1 for b in sample if b < 9 or 13 < b < 32)
    return control / len(sample) > 0.05


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
        try:
            return data.decode(name)
        except (LookupError, UnicodeDecodeError):
            continue
    try:
        from charset_normalizer import from_bytes

        best = from_bytes(data[:200_000]).best()
        if best is not None and best.encoding:
            return data.decode(best.encoding, errors="replace")
    except ImportError:
        pass
    return data.decode("cp1252", errors="replace")


def html_links(html: str, base_url: str, limit: int = 50) -> tuple[tuple[str, str], ...]:
    """Outgoing http(s) links as ``(anchor text, absolute URL)``, first occurrence order."""
    from lxml import html as lxml_html

    try:
        tree = lxml_html.fromstring(html)
    except (ValueError, lxml_html.etree.ParserError):
        return ()
    links: dict[str, str] = {}
    for anchor in tree.iter("a"):
        href = (anchor.get("href") or "").strip()
        if not href or href.startswith(("#", "javascript:", "mailto:", "tel:")):
            continue
        absolute = urljoin(base_url, href).split("#", 1)[0]
        if urlsplit(absolute).scheme not in ("http", "https") or absolute in links:
            continue
        links[absolute] = " ".join(anchor.text_content().split())[:120]
        if len(links) >= limit:
            break
    return tuple((text, url) for url, text in links.items())


def _html_title(html: str) -> str:
    match = re.search(r"<title[^>]*>(.*?)</title>", html, re.I | re.S)
    if not match:
        return ""
    import html as html_lib

    return " ".join(html_lib.unescape(match.group(1)).split())


def _html_text(html: str, url: str) -> str:
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
        text = "\n".join(line.strip() for line in text.splitlines() if line.strip())
        if text:
            return text
    except Exception:  # readability raises bare Exceptions on odd markup
        pass
    from lxml import html as lxml_html

    try:
        tree = lxml_html.fromstring(html)
    except (ValueError, lxml_html.etree.ParserError):
        return ""
    for bad in tree.xpath("//script|//style|//noscript"):
        bad.drop_tree()
    return "\n".join(line.strip() for line in tree.text_content().splitlines() if line.strip())


def pdf_text(data: bytes) -> tuple[str, str]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        title = ""
        if reader.metadata is not None and reader.metadata.title:
            title = str(reader.metadata.title)
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ExtractionError(f"the PDF could not be read ({type(exc).__name__}: {exc})") from exc
    text = "\n\n".join(f"[page {i}]\n{p.strip()}" for i, p in enumerate(pages, 1) if p.strip())
    if not text:
        raise ExtractionError("the PDF has no extractable text (scanned images only?)")
    return title, text


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
        body = _html_text(text, url)
        links = html_links(text, url, max_links) if max_links > 0 else ()
        return ExtractedPage("html", _html_title(text), body, links)
    return ExtractedPage("text", "", text.strip())
