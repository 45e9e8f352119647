"""The ``visual_inspector`` tool: read or look at one of the current task's attached files.

Query: a file name (as attached to the task), optionally with a question —
``chart.png | what is the highest bar?`` or ``what is the highest bar in chart.png``. When
the task has exactly one attachment the name may be omitted. Only files attached to the
current task (``ctx.task.files``) can be opened; any other path is refused.

Documents (xlsx, csv, pdf, docx, pptx, json, txt, zip, ...) are turned into text locally
by :mod:`coa_envs.tools.file_reader`. Images and audio go to an OpenAI-compatible
multimodal endpoint (``chat.completions`` with an ``image_url`` data URL or an
``input_audio`` part) when ``base_url`` and ``model`` are configured (backend ``openai``);
otherwise — or with backend ``files`` — the observation says the endpoint is not configured.
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
from pathlib import Path
from typing import Any

import httpx

from coa_envs.options import Schema
from coa_envs.tools.file_reader import FileReadError, file_kind, read_file
from coa_envs.types import ErrorKind, ToolContext, ToolResult, ToolSpec
from coa_envs.web.extract import cut_text
from coa_envs.web.fetch import api_client
from coa_envs.web.llm import ChatEndpoint, ChatError, chat

__all__ = ["BACKENDS", "SPEC", "VisualInspectorTool", "build", "option_schema", "parse_file_query"]

SPEC = ToolSpec(name="visual_inspector", usage="file name | question", summary="read an attached file or image.",
                argument="an attached file's name, optionally followed by ' | ' and a question about it")

BACKENDS: tuple[str, ...] = ("openai", "files")
_IMAGE_PROMPT = ("Describe this image in detail for someone who cannot see it: all visible text, numbers, "
                 "labels, objects, their positions and colours.")
_AUDIO_PROMPT = "Transcribe this audio verbatim, then note anything else audible that matters."
_MAX_MEDIA_BYTES = 20_000_000


def parse_file_query(query: str, files: tuple[str, ...]) -> tuple[str | None, str]:
    """Pick the attachment the query names and return ``(path, question)``.

    ``name | question`` is split at the first ``|``; otherwise the longest attached file name
    (or path) that occurs in the query wins. With a single attachment and no name, that one.
    """
    query = query.strip()
    head, bar, tail = query.partition("|")
    candidates = sorted(files, key=lambda f: len(Path(f).name), reverse=True)
    if bar:
        for path in candidates:
            if head.strip() in (path, Path(path).name):
                return path, tail.strip()
    for path in candidates:
        for token in (path, Path(path).name):
            if token and token in query:  # the sentence around the name is the question
                question = " ".join(query.replace("|", " ").split())
                return path, "" if question == token else question
    if len(files) == 1:
        return files[0], query.replace("|", " ").strip()
    return None, query


class VisualInspectorTool:
    """Attachment reader; thread-safe (no shared mutable state besides the HTTP config)."""

    name = "visual_inspector"

    def __init__(self, backend: str = "openai", *, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 120.0,
                 max_retries: int = 2, max_tokens: int = 1024, max_chars: int = 20000) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown visual_inspector backend {backend!r}; choose one of {BACKENDS}")
        self.backend = backend
        self.max_chars = int(max_chars)
        self._endpoint: ChatEndpoint | None = None
        self._client: httpx.Client | None = None
        if backend == "openai":
            self._endpoint = ChatEndpoint.from_config({
                "base_url": base_url, "model": model, "api_key": api_key, "api_key_env": api_key_env,
                "timeout_s": timeout_s, "max_retries": max_retries, "max_tokens": max_tokens,
            })
        self._client = api_client(self._endpoint.timeout_s) if self._endpoint is not None else None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def cache_context(self, ctx: ToolContext) -> str:
        """The answer depends on which files the task has: key the cache on their contents' identity."""
        if ctx.task is None or not ctx.task.files:
            return ""
        digest = hashlib.sha256()
        for path in sorted(ctx.task.files):
            stat = Path(path).stat() if Path(path).exists() else None
            digest.update(f"{Path(path).name}:{stat.st_size if stat else -1}\n".encode())
        return f"{ctx.task.task_id}:{digest.hexdigest()[:16]}"

    def _ask_model(self, path: Path, kind: str, question: str) -> ToolResult:
        if self._endpoint is None:
            return ToolResult.failure(
                f"{path.name} is {'an image' if kind == 'image' else 'audio'}; reading it needs a multimodal "
                "model, and none is configured (set visual_inspector base_url and model to an "
                "OpenAI-compatible endpoint).", ErrorKind.NOT_CONFIGURED)
        data = path.read_bytes()
        if len(data) > _MAX_MEDIA_BYTES:
            return ToolResult.failure(f"{path.name} is too large to send ({len(data)} bytes).", ErrorKind.TOOL_ERROR)
        encoded = base64.b64encode(data).decode("ascii")
        if kind == "image":
            mime = mimetypes.guess_type(path.name)[0] or "image/png"
            media: dict[str, Any] = {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{encoded}"}}
            prompt = question or _IMAGE_PROMPT
        else:
            media = {"type": "input_audio", "input_audio": {"data": encoded, "format": path.suffix.lower()[1:]}}
            prompt = question or _AUDIO_PROMPT
        messages = [{"role": "user", "content": [{"type": "text", "text": prompt}, media]}]
        try:
            answer = chat(self._endpoint, messages, self._client)
        except ChatError as exc:
            return ToolResult.failure(f"The multimodal model could not read {path.name}: {exc}", exc.kind,
                                      transient=exc.kind == ErrorKind.TOOL_TIMEOUT)
        # The endpoint's answer keeps to max_chars like a document's text: an endpoint (or a model
        # that never stops) could fill max_response_bytes, megabytes, in one observation.
        shown = cut_text(answer, self.max_chars)
        return ToolResult(f"File: {path.name}\n{shown}",
                          details={"file": path.name, "kind": kind, "truncated": len(shown) < len(answer)})

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        files = tuple(ctx.task.files) if ctx.task is not None else ()
        if not files:
            return ToolResult.failure("This task has no attached files to inspect.", ErrorKind.BAD_ACTION)
        chosen, question = parse_file_query(query or "", files)
        if chosen is None:
            names = ", ".join(Path(f).name for f in files)
            return ToolResult.failure(f"No attached file matches '{query.strip()}'. Attached files: {names}.",
                                      ErrorKind.BAD_ACTION)
        path = Path(chosen)
        if not path.is_file():
            return ToolResult.failure(f"The attachment {path.name} is missing on disk.", ErrorKind.TOOL_ERROR)
        kind = file_kind(path.name)
        if kind in ("image", "audio"):
            return self._ask_model(path, kind, question)
        try:
            text = read_file(path, self.max_chars)
        except FileReadError as exc:
            return ToolResult.failure(f"Could not read {path.name}: {exc}", ErrorKind.TOOL_ERROR)
        header = f"File: {text.name} ({text.kind})"
        if question:
            header += f"\nYour question: {question} (the file's full text follows; answer from it)"
        return ToolResult(f"{header}\n{text.text}",
                          details={"file": text.name, "kind": text.kind, "truncated": text.truncated})


def option_schema(backend: str) -> Schema:
    """The constructor's keyword parameters (checked at make time)."""
    return Schema.of_callable("tools.visual_inspector", VisualInspectorTool.__init__, skip=("backend",),
                              minimums={"timeout_s": 0, "max_retries": 0, "max_tokens": 1, "max_chars": 1})


def build(backend: str = "openai", **config: Any) -> VisualInspectorTool:
    """Registry entry point, e.g. ``visual_inspector: {backend: openai, base_url: ..., model: ...}``."""
    return VisualInspectorTool(backend, **config)
