"""visual_inspector and file_reader: every GAIA attachment type becomes text or a clear observation."""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from coa_envs.tools.file_reader import FileReadError, file_kind, read_file
from coa_envs.tools.visual_inspector import build, parse_file_query
from coa_envs.types import ErrorKind, Task, ToolContext
from coa_envs.web.testing import make_pdf


def _png(path: Path) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 4 for _ in range(4))  # 4x4 red
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return path


@pytest.fixture(scope="module")
def attachments(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("attachments")
    files: dict[str, Path] = {}

    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Sales"
    sheet.append(["Region", "Q1", "Q2"])
    sheet.append(["North", 120, 135.5])
    sheet.append(["South", 98, None])
    from openpyxl.styles import PatternFill

    sheet["A2"].fill = PatternFill("solid", fgColor="FF00B050")  # a green cell
    book.create_sheet("Notes").append(["Audited by Kim"])
    files["xlsx"] = root / "sales.xlsx"
    book.save(files["xlsx"])

    import docx

    document = docx.Document()
    document.add_paragraph("Meeting minutes: the budget was approved.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Item", "Cost"
    table.cell(1, 0).text, table.cell(1, 1).text = "Chairs", "450"
    files["docx"] = root / "minutes.docx"
    document.save(files["docx"])

    from pptx import Presentation

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Roadmap 2025"
    slide.placeholders[1].text = "Launch in September"
    slide.notes_slide.notes_text_frame.text = "Mention the delay"
    files["pptx"] = root / "deck.pptx"
    deck.save(files["pptx"])

    files["pdf"] = root / "report.pdf"
    files["pdf"].write_bytes(make_pdf(["Total revenue: 12.5 million euros"]))
    files["csv"] = root / "people.csv"
    files["csv"].write_bytes("name;city\nJosé;Besançon\nZoë;Zürich\n".encode("latin-1"))
    files["json"] = root / "config.json"
    files["json"].write_text(json.dumps({"name": "probe", "mass_kg": 721}), encoding="utf-8")
    files["txt"] = root / "poem.txt"
    files["txt"].write_text("Roses are red.\nViolets are blue.\n", encoding="utf-8")
    files["zip"] = root / "bundle.zip"
    with zipfile.ZipFile(files["zip"], "w") as archive:
        archive.writestr("inner/readme.txt", "The password is swordfish.")
        archive.writestr("inner/data.json", '{"answer": 42}')
        archive.writestr("inner/photo.png", b"\x89PNG")
    files["png"] = _png(root / "chart.png")
    files["mp3"] = root / "voice.mp3"
    files["mp3"].write_bytes(b"ID3\x03\x00\x00\x00\x00\x00\x00" + bytes(64))
    files["broken"] = root / "broken.xlsx"
    files["broken"].write_bytes(b"this is not a spreadsheet")
    return files


@pytest.mark.parametrize(
    "key, expected",
    [
        ("xlsx", ["## Sheet: Sales", "Region | Q1 | Q2", "North [fill #00B050] | 120 | 135.5", "South | 98",
                  "## Sheet: Notes", "Audited by Kim"]),
        ("docx", ["Meeting minutes: the budget was approved.", "Item | Cost", "Chairs | 450"]),
        ("pptx", ["## Slide 1", "Roadmap 2025", "Launch in September", "(notes) Mention the delay"]),
        ("pdf", ["Total revenue: 12.5 million euros"]),
        ("csv", ["name | city", "José | Besançon", "Zoë | Zürich"]),  # latin-1 bytes, ';' delimiter sniffed
        ("json", ['"mass_kg": 721']),
        ("txt", ["Roses are red.\nViolets are blue."]),
        ("zip", ["Archive with 3 file(s)", "- inner/readme.txt (26 bytes)", "## inner/readme.txt",
                 "The password is swordfish.", '"answer": 42']),
    ],
)
def test_documents_become_text(attachments, key, expected) -> None:
    text = read_file(attachments[key]).text
    for fragment in expected:
        assert fragment in text


def test_reader_cuts_long_output_and_rejects_unreadable_files(attachments, tmp_path) -> None:
    long_file = tmp_path / "long.txt"
    long_file.write_text("x" * 5000)
    cut = read_file(long_file, max_chars=100)
    assert cut.truncated and "[... file cut: showed 100 of 5000 characters ...]" in cut.text
    with pytest.raises(FileReadError, match=r"could not read broken\.xlsx as xlsx"):
        read_file(attachments["broken"])
    with pytest.raises(FileReadError, match="cannot be read as text"):
        read_file(attachments["png"])
    assert (file_kind("a.PNG"), file_kind("b.mp3"), file_kind("c.xlsx"), file_kind("d.exe")) == (
        "image", "audio", "document", "unknown")


def _ctx(*paths: Path) -> ToolContext:
    return ToolContext(task=Task("gaia-1", "question?", files=tuple(str(p) for p in paths)))


def test_query_picks_the_named_attachment() -> None:
    files = ("/data/a/sales.xlsx", "/data/a/chart.png")
    assert parse_file_query("chart.png | which bar is tallest?", files) == ("/data/a/chart.png",
                                                                          "which bar is tallest?")
    assert parse_file_query("what is the Q2 total in sales.xlsx?", files) == ("/data/a/sales.xlsx",
                                                                             "what is the Q2 total in sales.xlsx?")
    assert parse_file_query(" chart.png ", files) == ("/data/a/chart.png", "")
    assert parse_file_query("anything", ("/only/file.csv",)) == ("/only/file.csv", "anything")
    assert parse_file_query("other.pdf", files) == (None, "other.pdf")


def test_inspector_reads_documents_of_the_current_task_only(attachments) -> None:
    tool = build("files")
    ctx = _ctx(attachments["xlsx"], attachments["docx"])
    result = tool.run("sales.xlsx | total for North?", ctx)
    assert result.ok and result.text.startswith("File: sales.xlsx (spreadsheet)\nYour question: total for North?")
    assert "North [fill #00B050] | 120 | 135.5" in result.text
    outside = tool.run(str(attachments["pdf"]), ctx)  # exists on disk, but not attached to this task
    assert outside.error_kind == ErrorKind.BAD_ACTION and "Attached files: sales.xlsx, minutes.docx" in outside.text
    none = tool.run("sales.xlsx", ToolContext(task=Task("t", "q")))
    assert none.error_kind == ErrorKind.BAD_ACTION and "no attached files" in none.text
    broken = tool.run("broken.xlsx", _ctx(attachments["broken"]))
    assert broken.error_kind == ErrorKind.TOOL_ERROR and "Could not read broken.xlsx" in broken.text


def test_images_and_audio_need_a_configured_model(attachments) -> None:
    for backend in ("files", "openai"):  # openai backend without base_url/model is not configured either
        result = build(backend).run("chart.png", _ctx(attachments["png"]))
        assert result.error_kind == ErrorKind.NOT_CONFIGURED and "multimodal model" in result.text


def test_images_and_audio_go_to_the_multimodal_endpoint(attachments, chat_api) -> None:
    tool = build("openai", base_url=chat_api.base_url + "/v1", model="vision-model", api_key="k")
    ctx = _ctx(attachments["png"], attachments["mp3"])
    image = tool.run("chart.png | what colour is it?", ctx)
    assert image.ok and image.text.startswith("File: chart.png\nMODEL SAW text:what colour is it? "
                                              "image:data:image/png;base64,iVBOR")
    sent = chat_api.requests[-1].json()
    assert sent["model"] == "vision-model"
    assert sent["messages"][0]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    audio = tool.run("voice.mp3", ctx)
    assert audio.ok and "audio:mp3" in audio.text and "Transcribe" in audio.text
    chat_api.behaviour = lambda _r: (400, "application/json", b'{"error": "no vision"}')
    refused = tool.run("chart.png", ctx)
    assert refused.error_kind == ErrorKind.TOOL_ERROR and "HTTP 400" in refused.text


def test_cache_context_distinguishes_tasks(attachments) -> None:
    tool = build("files")
    assert tool.cache_context(_ctx(attachments["xlsx"])) != tool.cache_context(_ctx(attachments["csv"]))
    assert tool.cache_context(ToolContext()) == ""
