"""Reading the project's Markdown for the docs tests: pages, fenced blocks, headings, links.

A fenced block is *runnable* when the line before its opening fence is an HTML comment
``<!-- run -->`` (cheap, run by default) or ``<!-- run: slow -->`` (run with ``-m slow``),
optionally with ``expect="text"`` items that its output must contain. The comment is invisible
in the rendered page, so the reader sees the same block the test runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TOP_LEVEL = ("README.md", "CHANGELOG.md", "CONTRIBUTING.md")

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[^\n`]*)$")
_MARKER = re.compile(r"^<!--\s*run(?P<slow>:\s*slow)?(?P<rest>[^>]*)-->\s*$")
_EXPECT = re.compile(r'expect="([^"]*)"')
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    language: str
    code: str
    runnable: bool
    slow: bool
    expect: tuple[str, ...]

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """Every Markdown file a user reads: the top-level files and the docs site."""
    top = [ROOT / name for name in TOP_LEVEL if (ROOT / name).is_file()]
    return top + sorted(DOCS.rglob("*.md"))


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        if not opening:
            number += 1
            continue
        fence, start = opening.group("fence"), number
        end = next((i for i in range(start + 1, len(lines)) if lines[i].strip().startswith(fence)
                    and lines[i].strip().strip(fence[0]) == ""), len(lines))
        marker = _MARKER.match(lines[start - 1].strip()) if start else None
        info = opening.group("info").strip()
        found.append(Block(page=page, line=start + 1, language=(info.split() or [""])[0].strip("{}.").lower(),
                           code="\n".join(lines[start + 1:end]) + "\n", runnable=marker is not None,
                           slow=bool(marker and marker.group("slow")),
                           expect=tuple(_EXPECT.findall(marker.group("rest"))) if marker else ()))
        number = end + 1
    return found


def prose(page: Path) -> str:
    """The page without its fenced blocks (links and headings inside code are not links)."""
    text = page.read_text(encoding="utf-8")
    lines, keep, fence = text.split("\n"), [], None
    for line in lines:
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group("fence")
            continue
        if fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = None
            continue
        keep.append(line)
    return "\n".join(keep)


def slug(title: str) -> str:
    """The anchor GitHub and mkdocs' toc give a heading (lower case, punctuation dropped)."""
    title = re.sub(r"`([^`]*)`", r"\1", title)
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    title = re.sub(r"[^\w\s-]", "", title.lower())
    return re.sub(r"[\s]+", "-", title.strip())


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for line in prose(page).split("\n"):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}_{count}")
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def links(page: Path) -> list[str]:
    return _LINK.findall(prose(page))
