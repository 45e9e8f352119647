"""A real HTTP server on 127.0.0.1 serving the awkward pages a crawler must survive.

Used by the web-tool tests and benchmarks (and usable by anyone testing a crawler
offline): an article, a JavaScript-rendered page, a PDF, redirect chains and loops, a 404
and a 500, a slow page, a huge page, pages in latin-1, binary junk, redirects to the cloud
metadata address and to ``file://``, and numbered pages for throughput runs. The server
is the standard library's threaded ``http.server``; it only ever binds loopback.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from coa_envs.loopback import QuietHandler, Serving, loopback_server

__all__ = ["ARTICLE_FACT", "JS_SECRET", "PDF_FACT", "TestSite", "make_pdf", "serve_test_site"]

ARTICLE_FACT = "The Zephyr Falls Observatory was founded in 1923 by Margaret Ellison"
JS_SECRET = "JS-4242"
PDF_FACT = "Annual report: revenue was 12.5 million euros"
LATIN1_TEXT = "Café crème à Besançon, naïve façade, prix 3 €"  # € is not latin-1: cp1252 page only

_ARTICLE = f"""<!doctype html><html><head><title>Zephyr Falls Observatory</title></head><body>
<nav><a href="/">Home</a> <a href="/js.html">Live data</a></nav>
<article><h1>History of the Zephyr Falls Observatory</h1>
<p>{ARTICLE_FACT}, an astronomer who had studied in Edinburgh and Uppsala. The first telescope,
a 40-centimetre refractor, arrived by rail two years later and was mounted on the eastern ridge.</p>
<p>During the 1950s the observatory catalogued more than three thousand variable stars. Its
archive of photographic plates is still consulted by researchers who study long-period variables.</p>
<p>Today the site hosts public evenings every Friday and a small museum about early astronomy.
See the <a href="/doc.pdf">annual report</a> and the <a href="page/3">third page</a>.</p>
</article><footer>Contact: observatory@example.org</footer></body></html>"""

_JS_PAGE = """<!doctype html><html><head><title>Live data</title></head><body>
<div id="app">Loading…</div>
<script>
  const code = ['JS', '42' + '42'].join('-');
  document.getElementById('app').innerHTML =
    '<h1>Rendered dashboard</h1><p>The secret code is ' + code +
    ', produced by a script after the page loaded.</p><p>Only a browser sees this sentence.</p>';
  document.title = 'Live data (rendered)';
</script></body></html>"""


def make_pdf(lines: list[str], title: str = "") -> bytes:
    """A minimal valid one-page PDF with ``lines`` of Helvetica text (pypdf extracts them)."""
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    stream = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({esc(x)}) '" for x in lines) + " ET"
    info = f"<< /Title ({esc(title)}) >>" if title else "<< >>"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        info,
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info {len(objects)} 0 R >>\n"
            f"startxref\n{xref}\n%%EOF\n").encode()
    return bytes(out)


def _numbered_page(n: int) -> str:
    return (
        f"<!doctype html><html><head><title>Page {n}</title></head><body><article>"
        f"<h1>Page number {n}</h1><p>Page {n} fact: the magic number of this page is {n * 7}.</p>"
        f"<p>This paragraph exists so that the extractor sees a real article body with enough text "
        f"to keep. It talks about nothing in particular, at some length, for page {n}.</p>"
        f'<p><a href="/page/{n + 1}">next page</a></p></article></body></html>'
    )


@dataclass
class TestSite:
    """A running test site: ``url(path)`` builds absolute URLs; ``hits`` counts requests."""

    base_url: str
    hits: Counter[str] = field(default_factory=Counter)

    __test__ = False  # not a pytest test class

    def url(self, path: str = "/") -> str:
        return self.base_url + (path if path.startswith("/") else "/" + path)


def _make_handler(site: TestSite, extra_pages: dict[str, tuple[str, bytes]]) -> type:
    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes; with Nagle on, delayed ACKs add ~40 ms per request.
        disable_nagle_algorithm = True

        def _redirect(self, location: str, status: int = 302) -> None:
            self.send_body(status, b"", "text/html", {"Location": location})

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            path, query = parts.path, parse_qs(parts.query)
            site.hits[path] += 1
            html = "text/html; charset=utf-8"
            if path in extra_pages:
                content_type, body = extra_pages[path]
                self.send_body(200, body, content_type)
            elif path in ("/", "/index.html"):
                links = "".join(f'<li><a href="{p}">{p}</a></li>' for p in
                                ("/article.html", "/js.html", "/doc.pdf", "/plain.txt", "/page/1"))
                self.send_body(200, f"<html><head><title>Test site</title></head><body><h1>Test site</h1>"
                                    f"<p>Index of the pages on this test site.</p><ul>{links}</ul></body></html>"
                               .encode(), html)
            elif path == "/article.html":
                self.send_body(200, _ARTICLE.encode(), html)
            elif path == "/js.html":
                self.send_body(200, _JS_PAGE.encode(), html)
            elif path == "/doc.pdf":
                self.send_body(200, make_pdf([PDF_FACT, "Prepared by the finance office."], "Annual report"),
                               "application/pdf")
            elif path == "/broken.pdf":
                self.send_body(200, b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage", "application/pdf")
            elif path == "/plain.txt":
                self.send_body(200, "Plain text file.\nSecond line with ünïcödé.\n".encode(),
                               "text/plain; charset=utf-8")
            elif path == "/latin1.html":
                body = f"<html><head><title>Latin</title></head><body><p>{LATIN1_TEXT[:-4]}</p></body></html>"
                self.send_body(200, body.encode("latin-1"), "text/html; charset=iso-8859-1")
            elif path == "/latin1-meta.html":
                body = (f'<html><head><meta charset="windows-1252"><title>Meta</title></head>'
                        f"<body><p>{LATIN1_TEXT}</p></body></html>")
                self.send_body(200, body.encode("cp1252"), "text/html")
            elif path == "/binary":
                junk = random.Random(1234).randbytes(50_000)
                self.send_body(200, junk, "application/octet-stream")
            elif path == "/image.png":
                self.send_body(200, b"\x89PNG\r\n\x1a\n" + bytes(200), "image/png")
            elif path == "/empty":
                self.send_body(200, b"", "text/html")
            elif path.startswith("/redirect/"):
                step = int(path.rsplit("/", 1)[1] or 0)
                self._redirect(f"/redirect/{step + 1}" if step < 3 else "/article.html", 301 if step % 2 else 302)
            elif path.startswith("/chain/"):
                left = int(path.rsplit("/", 1)[1] or 0)
                self._redirect(f"/chain/{left - 1}" if left > 0 else "/page/0")
            elif path == "/loop/a":
                self._redirect("/loop/b")
            elif path == "/loop/b":
                self._redirect("/loop/a")
            elif path == "/to-metadata":
                self._redirect("http://169.254.169.254/latest/meta-data/")
            elif path == "/to-file":
                self._redirect("file:///etc/passwd")
            elif path == "/to":  # open redirect: /to?u=<url>
                self._redirect(query.get("u", ["/"])[0])
            elif path == "/error":
                self.send_body(500, b"<html><body>Internal error</body></html>", html)
            elif path == "/slow":
                time.sleep(float(query.get("s", ["3"])[0]))
                self.send_body(200, _numbered_page(99).encode(), html)
            elif path == "/huge":
                repeats = int(query.get("n", ["8000"])[0])
                paragraphs = "".join(f"<p>Paragraph {i}: " + "lorem ipsum dolor sit amet, consectetur "
                                     "adipiscing elit. " * 20 + "</p>\n" for i in range(repeats))
                body = f"<html><head><title>Huge</title></head><body>{paragraphs}</body></html>"
                self.send_body(200, body.encode(), html)
            elif path.startswith("/page/"):
                self.send_body(200, _numbered_page(int(path.rsplit("/", 1)[1] or 0)).encode(), html)
            elif path == "/beacon":
                self.send_body(200, b"GIF89a", "image/gif")
            else:
                self.send_body(404, b"<html><body><h1>404 Not Found</h1></body></html>", html)

    return Handler


@contextmanager
def serve_test_site(
    host: str = "127.0.0.1", extra_pages: dict[str, tuple[str, bytes]] | None = None
) -> Iterator[TestSite]:
    """Serve the test site on ``host`` (loopback only) at a free port; stop it on exit.

    ``extra_pages`` maps a path to ``(content_type, body)`` for pages a test needs.
    """
    server = loopback_server(BaseHTTPRequestHandler, host)
    site = TestSite(base_url=f"http://{host}:{server.server_address[1]}")
    # The pages link to absolute URLs, so the handler is made once the port is known.
    server.RequestHandlerClass = _make_handler(site, dict(extra_pages or {}))
    with Serving(server):
        yield site
