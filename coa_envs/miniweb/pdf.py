"""A tiny PDF writer: one page of Helvetica text, enough for a crawler's PDF extraction.

The mini-web needs a real PDF (annual reports) without pulling a PDF-writing library into
the package; the format for plain text on one page is small enough to write by hand:
five objects, a cross-reference table with exact byte offsets, and a trailer.
"""

from __future__ import annotations

__all__ = ["text_pdf"]


def _escape(text: str) -> str:
    # Latin-1 only (standard Type1 fonts); anything else becomes '?'.
    text = text.encode("latin-1", "replace").decode("latin-1")
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_pdf(lines: list[str], title: str = "") -> bytes:
    """Return the bytes of a valid one-page PDF showing ``lines`` top to bottom."""
    shown = " ".join(f"({_escape(line)}) '" for line in lines)
    stream = f"BT /F1 11 Tf 60 740 Td 15 TL {shown} ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(stream.encode('latin-1'))} >>\nstream\n{stream}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        f"<< /Title ({_escape(title)}) /Producer (coa-envs miniweb) >>",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref_at = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode("ascii")
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode("ascii")
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info {len(objects)} 0 R >>\n"
        f"startxref\n{xref_at}\n%%EOF\n"
    ).encode("ascii")
    return bytes(out)
