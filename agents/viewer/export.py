"""Static export: the viewer page and a selection of episodes in one self-contained HTML file.

A shared file cannot page from a server, so the export embeds what it shows and is capped:
at most ``max_episodes`` episodes and ``max_bytes`` of embedded JSON (token pieces included),
whichever comes first. The selection takes whole *tasks* in the order the filters and sort
give, with every matching episode of each task from every run, so a comparison of two runs
in the file always has both sides; a banner in the page says how many matching episodes
were left out and by which cap. The page runs the same scripts as the served one, reading
the embedded data instead of the JSON API.

Nothing in the file reaches the network: scripts and styles are inline and pinned by hash in
a Content-Security-Policy, and the data sits in a ``<script type="application/json">`` block
with ``<``, ``>`` and ``&`` escaped, so no trajectory text can close that block.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.viewer.app import ASSETS, read_asset
from agents.viewer.query import EpisodeQuery
from agents.viewer.service import ViewerData

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_EPISODES", "ExportResult", "export_html"]

DEFAULT_MAX_EPISODES = 500
DEFAULT_MAX_BYTES = 25 * 1024 * 1024
_PAGE = 500


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What was written; ``capped_by`` names the cap that stopped the selection, if any."""

    path: str
    matched: int
    included: int
    capped_by: str | None
    bytes: int


def _json_for_html(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _csp_hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode() + "'"


def _ordered_tasks(data: ViewerData, query: EpisodeQuery) -> tuple[list[tuple[str, str]], int]:
    """Distinct (env, task) in the order of the filtered, sorted list; and the match count."""
    seen: dict[tuple[str, str], None] = {}
    offset, total = 0, 0
    while True:
        page = data.episodes(replace(query, offset=offset, limit=_PAGE))
        total = page["total"]
        for row in page["rows"]:
            seen.setdefault((row["env_id"], row["task_id"]), None)
        offset += _PAGE
        if offset >= total:
            return list(seen), total


def _select(data: ViewerData, query: EpisodeQuery, max_episodes: int, max_bytes: int,
            with_tokens: bool) -> tuple[list[dict], dict[str, Any], int, str | None]:
    """Whole tasks while they fit; the first task is cut to fit so an export is never empty."""
    tasks, matched = _ordered_tasks(data, query)
    rows: list[dict] = []
    episodes: dict[str, Any] = {}
    used = 0
    for env_id, task_id in tasks:
        members = data.episodes(replace(query, env=env_id, task="", task_id=task_id, sort="task", order="asc",
                                        offset=0, limit=_PAGE))["rows"]
        payloads, sizes = [], []
        for row in members:
            payload = data.episode(row["run"], row["file"], row["row"])
            if with_tokens and row["has_ids"]:
                payload["tokens"] = data.tokens(row["run"], row["file"], row["row"])
            payloads.append(payload)
            sizes.append(len(json.dumps(payload, ensure_ascii=False)) + 300)
        over = ("max_episodes" if len(rows) + len(members) > max_episodes
                else "max_bytes" if used + sum(sizes) > max_bytes else None)
        if over is not None:
            first_task = not rows
            for row, payload, size in zip(members, payloads, sizes, strict=True):
                if not first_task or len(rows) >= max_episodes or used + size > max_bytes:
                    break
                rows.append(row)
                episodes[row["key"]] = payload
                used += size
            return rows, episodes, matched, over
        rows.extend(members)
        episodes.update((row["key"], payload) for row, payload in zip(members, payloads, strict=True))
        used += sum(sizes)
    return rows, episodes, matched, None


def export_html(data: ViewerData, out: str | os.PathLike[str], query: EpisodeQuery | None = None, *,
                max_episodes: int = DEFAULT_MAX_EPISODES, max_bytes: int = DEFAULT_MAX_BYTES,
                with_tokens: bool = True) -> ExportResult:
    """Write ``out``: the page plus the selected episodes (see the module docstring for the caps)."""
    if max_episodes < 1 or max_bytes < 1:
        raise ValueError("max_episodes and max_bytes must be >= 1")
    query = query or EpisodeQuery()
    rows, episodes, matched, capped_by = _select(data, query, max_episodes, max_bytes, with_tokens)
    filters = {k: v for k, v in (("env", query.env), ("task", query.task), ("status", query.status),
                                 ("min_reward", query.min_reward), ("max_reward", query.max_reward),
                                 ("sort", query.sort), ("order", query.order)) if v not in ("", None)}
    payload = {
        "export": {"created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "matched": matched,
                   "included": len(rows), "capped_by": capped_by, "max_episodes": max_episodes,
                   "max_bytes": max_bytes, "filters": filters},
        "runs": data.runs_info(), "rows": rows, "episodes": episodes,
    }
    style = read_asset("viewer.css")
    script = "\n".join(read_asset(name) for name in ASSETS if name.endswith(".js"))
    for name, source in (("style", style), ("script", script)):
        if f"</{name}" in source.lower():
            raise ValueError(f"an asset contains </{name}, which would end the inline block early")
    csp = (f"default-src 'none'; script-src {_csp_hash(script)}; style-src {_csp_hash(style)}; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    page = read_asset("index.html")
    head = f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n<style>{style}</style>'
    body = (f'<script type="application/json" id="coa-data">{_json_for_html(payload)}</script>\n'
            f"<script>{script}</script>")
    page = _replace_once(page, '<link rel="stylesheet" href="assets/viewer.css">', head)
    scripts = "\n".join(f'<script src="assets/{name}"></script>' for name in ASSETS if name.endswith(".js"))
    page = _replace_once(page, scripts, body)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.part{os.getpid()}")
    partial.write_text(page, encoding="utf-8")
    partial.replace(path)
    return ExportResult(str(path), matched, len(rows), capped_by, path.stat().st_size)


def _replace_once(page: str, old: str, new: str) -> str:
    if page.count(old) != 1:
        raise ValueError(f"index.html must contain {old!r} exactly once (the export inlines it)")
    return page.replace(old, new)
