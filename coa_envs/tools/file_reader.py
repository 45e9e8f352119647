"""Turn task attachments (GAIA-style files) into text with the library made for each format.

xlsx/xlsm (openpyxl), csv/tsv (csv, with charset detection), pdf (pypdf), docx
(python-docx), pptx (python-pptx), json/jsonl, plain text and markup, html (the crawler's
extractor) and zip archives (member list, then the readable members). Images and audio are
not documents: :func:`file_kind` tells the caller to send them to a multimodal model.

Every failure is a :class:`FileReadError` whose message is fit to show the model. Output is
cut at ``max_chars`` with a visible marker; zip members are bounded in number and size so
an archive bomb cannot exhaust memory.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AUDIO_SUFFIXES", "DOCUMENT_SUFFIXES", "IMAGE_SUFFIXES", "FileReadError", "FileText",
           "file_kind", "read_bytes", "read_file"]

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"})
AUDIO_SUFFIXES = frozenset({".mp3", ".wav", ".m4a", ".flac", ".ogg"})
_TEXT_SUFFIXES = frozenset({".txt", ".md", ".py", ".xml", ".yaml", ".yml", ".tex", ".log", ".ini", ".cfg",
                            ".js", ".css", ".sql", ".pdb", ".jsonld", ".r", ".c", ".cpp", ".java", ".sh"})
_MAX_ROWS = 2000
_MAX_ZIP_MEMBERS = 50
_MAX_MEMBER_BYTES = 20_000_000
_MAX_ZIP_TOTAL_BYTES = 60_000_000


class FileReadError(Exception):
    """The file cannot be turned into text; the message says why."""


@dataclass(frozen=True, slots=True)
class FileText:
    name: str
    kind: str
    text: str
    truncated: bool = False


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return " ".join(str(value).split())


def _rows_text(rows: list[list[str]]) -> str:
    while rows and not any(rows[-1]):
        rows.pop()
    return "\n".join(" | ".join(row).rstrip(" |") for row in rows)


def _fill(cell: object) -> str:
    """Solid background colours matter in some tasks ("sum the green cells"): show them."""
    fill = getattr(cell, "fill", None)
    if fill is None or fill.fill_type != "solid":
        return ""
    color = fill.fgColor
    if color.type == "rgb" and isinstance(color.rgb, str) and color.rgb not in ("00000000", "FFFFFFFF"):
        return f" [fill #{color.rgb[-6:]}]"
    if color.type == "theme":
        return f" [fill theme {color.theme}]"
    if color.type == "indexed" and color.indexed not in (64,):  # 64 = system foreground (no colour)
        return f" [fill indexed {color.indexed}]"
    return ""


def _xlsx(data: bytes) -> str:
    from openpyxl import load_workbook

    book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheets = []
        for sheet in book.worksheets:
            rows: list[list[str]] = []
            for index, row in enumerate(sheet.iter_rows()):
                if index >= _MAX_ROWS:
                    rows.append([f"[... more rows not shown; first {_MAX_ROWS} rows]"])
                    break
                rows.append([_cell(c.value) + _fill(c) for c in row])
            sheets.append(f"## Sheet: {sheet.title}\n{_rows_text(rows) or '(empty)'}")
        return "\n\n".join(sheets)
    finally:
        book.close()


def _csv(data: bytes, delimiter: str | None = None) -> str:
    from coa_envs.web.extract import decode_text

    text = decode_text(data)
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    rows = [[_cell(v) for v in row] for row in itertools.islice(reader, _MAX_ROWS)]
    return _rows_text(rows)


def _pdf(data: bytes) -> str:
    from coa_envs.web.extract import ExtractionError, pdf_text

    try:
        return pdf_text(data)[1]
    except ExtractionError as exc:
        raise FileReadError(str(exc)) from exc


def _docx(data: bytes) -> str:
    import docx

    document = docx.Document(io.BytesIO(data))
    parts = [p.text for p in document.paragraphs if p.text.strip()]
    for number, table in enumerate(document.tables, 1):
        rows = [[_cell(c.text) for c in row.cells] for row in table.rows]
        parts.append(f"## Table {number}\n{_rows_text(rows)}")
    return "\n".join(parts)


def _pptx(data: bytes) -> str:
    from pptx import Presentation

    slides = []
    for number, slide in enumerate(Presentation(io.BytesIO(data)).slides, 1):
        lines = []
        for shape in slide.shapes:
            if shape.has_text_frame and shape.text_frame.text.strip():
                lines.append(shape.text_frame.text.strip())
            if getattr(shape, "has_table", False) and shape.has_table:
                lines.append(_rows_text([[_cell(c.text) for c in row.cells] for row in shape.table.rows]))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame.text.strip():
            lines.append(f"(notes) {slide.notes_slide.notes_text_frame.text.strip()}")
        slides.append(f"## Slide {number}\n" + ("\n".join(lines) or "(no text)"))
    return "\n\n".join(slides)


def _json(data: bytes) -> str:
    from coa_envs.web.extract import decode_text

    text = decode_text(data)
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text  # JSON Lines or slightly broken JSON: the raw text is still informative


def _text(data: bytes) -> str:
    from coa_envs.web.extract import decode_text, looks_binary

    if looks_binary(data):
        raise FileReadError("the file is binary, not text")
    return decode_text(data)


def _html(data: bytes) -> str:
    from coa_envs.web.extract import ExtractionError, extract

    try:
        return extract(data, "text/html", max_links=0).text
    except ExtractionError as exc:
        raise FileReadError(str(exc)) from exc


def _zip(data: bytes, max_chars: int) -> str:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise FileReadError(f"not a valid zip archive ({exc})") from exc
    members = [m for m in archive.infolist() if not m.is_dir()]
    listing = "\n".join(f"- {m.filename} ({m.file_size} bytes)" for m in members[:200])
    parts = [f"Archive with {len(members)} file(s):\n{listing}"]
    total = 0
    for member in members[:_MAX_ZIP_MEMBERS]:
        suffix = Path(member.filename).suffix.lower()
        if suffix not in DOCUMENT_SUFFIXES or suffix == ".zip":
            continue
        if member.file_size > _MAX_MEMBER_BYTES or total + member.file_size > _MAX_ZIP_TOTAL_BYTES:
            parts.append(f"## {member.filename}\n(skipped: too large)")
            continue
        total += member.file_size
        try:
            parts.append(f"## {member.filename}\n{read_bytes(archive.read(member), member.filename, max_chars).text}")
        except (FileReadError, zipfile.BadZipFile, RuntimeError) as exc:  # RuntimeError: encrypted member
            parts.append(f"## {member.filename}\n(unreadable: {exc})")
    return "\n\n".join(parts)


_READERS: dict[str, tuple[str, Callable[[bytes], str]]] = {
    ".xlsx": ("spreadsheet", _xlsx), ".xlsm": ("spreadsheet", _xlsx),
    ".csv": ("table", _csv), ".tsv": ("table", lambda d: _csv(d, "\t")),
    ".pdf": ("pdf", _pdf), ".docx": ("document", _docx), ".pptx": ("slides", _pptx),
    ".json": ("json", _json), ".jsonl": ("json", _text), ".html": ("html", _html), ".htm": ("html", _html),
    **{suffix: ("text", _text) for suffix in _TEXT_SUFFIXES},
}
DOCUMENT_SUFFIXES = frozenset({*_READERS, ".zip"})


def file_kind(name: str) -> str:
    """``document`` (readable here), ``image``, ``audio`` (need a multimodal model) or ``unknown``."""
    suffix = Path(name).suffix.lower()
    if suffix in DOCUMENT_SUFFIXES:
        return "document"
    if suffix in IMAGE_SUFFIXES:
        return "image"
    if suffix in AUDIO_SUFFIXES:
        return "audio"
    return "unknown"


def _cut(text: str, max_chars: int) -> tuple[str, bool]:
    if len(text) <= max_chars:
        return text, False
    return text[:max_chars].rstrip() + f"\n[... file cut: showed {max_chars} of {len(text)} characters ...]", True


def read_bytes(data: bytes, name: str, max_chars: int = 20000) -> FileText:
    """Read a document given its bytes and file name (the suffix picks the reader)."""
    suffix = Path(name).suffix.lower()
    if suffix == ".zip":
        kind, text = "archive", _zip(data, max_chars)
    elif suffix in _READERS:
        kind, reader = _READERS[suffix]
        try:
            text = reader(data)
        except FileReadError:
            raise
        except Exception as exc:  # each library raises its own types for corrupt files
            raise FileReadError(f"could not read {Path(name).name} as {suffix[1:]}: "
                                f"{type(exc).__name__}: {exc}") from exc
    else:
        raise FileReadError(f"{Path(name).name}: files of type '{suffix or '(none)'}' cannot be read as text")
    text, truncated = _cut(text.strip() or "(the file has no text)", max_chars)
    return FileText(Path(name).name, kind, text, truncated)


def read_file(path: str | Path, max_chars: int = 20000) -> FileText:
    """Read a document from disk; see :func:`read_bytes`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FileReadError(f"cannot open {path.name}: {exc.strerror or exc}") from exc
    return read_bytes(data, path.name, max_chars)
