"""A small OpenAI-compatible chat client (httpx) for page summaries and multimodal questions.

We talk to ``POST {base_url}/chat/completions`` directly instead of depending on the
``openai`` package: the web tools need one call shape, explicit timeouts and retries, and
errors mapped to :class:`ErrorKind`. Any server that speaks the API works (vLLM, SGLang,
``coa serve``, hosted providers).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from coa_envs.types import ErrorKind
from coa_envs.web.decoding import BodyTooLarge, accepted_encodings, read_capped
from coa_envs.web.fetch import api_client, deadline

__all__ = ["ChatEndpoint", "ChatError", "chat"]


class ChatError(Exception):
    """The endpoint gave no usable answer; ``kind`` says whether it timed out or failed."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.TOOL_ERROR) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class ChatEndpoint:
    """Where and how to call the model. ``api_key`` may be None for local servers."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 2
    max_tokens: int = 1024
    temperature: float = 0.0
    max_response_bytes: int = 4_000_000  # a larger answer is refused unread (a broken or hostile server)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> ChatEndpoint | None:
        """Build from a tool's config block; None when no ``base_url``/``model`` is set.

        Keys: ``base_url``, ``model``, ``api_key`` or ``api_key_env`` (default
        ``OPENAI_API_KEY``), ``timeout_s``, ``max_retries``, ``max_tokens``, ``temperature``,
        ``max_response_bytes``.
        """
        if not config or not config.get("base_url") or not config.get("model"):
            return None
        known = {"base_url", "model", "api_key", "api_key_env", "timeout_s", "max_retries",
                 "max_tokens", "temperature", "max_input_chars", "max_response_bytes"}
        unknown = set(config) - known
        if unknown:
            raise ValueError(f"unknown LLM endpoint option(s) {sorted(unknown)}; known: {sorted(known)}")
        api_key = config.get("api_key") or os.environ.get(str(config.get("api_key_env", "OPENAI_API_KEY")))
        return cls(
            base_url=str(config["base_url"]).rstrip("/"),
            model=str(config["model"]),
            api_key=api_key or None,
            timeout_s=float(config.get("timeout_s", 60.0)),
            max_retries=int(config.get("max_retries", 2)),
            max_tokens=int(config.get("max_tokens", 1024)),
            temperature=float(config.get("temperature", 0.0)),
            max_response_bytes=int(config.get("max_response_bytes", 4_000_000)),
        )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers return content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _post_capped(http: httpx.Client, url: str, payload: Mapping[str, Any], headers: Mapping[str, str],
                 endpoint: ChatEndpoint) -> tuple[int, bytes]:
    """POST and read the answer, at most ``max_response_bytes`` of it, within ``timeout_s`` in all."""
    request = http.build_request("POST", url, json=payload, headers=headers, timeout=endpoint.timeout_s)
    end = time.monotonic() + endpoint.timeout_s
    # One deadline for the exchange: the body's here, the head's too through an api_client's connections.
    with deadline(endpoint.timeout_s), contextlib.closing(http.send(request, stream=True)) as response:
        return response.status_code, read_capped(response, endpoint.max_response_bytes, end)


def chat(endpoint: ChatEndpoint, messages: Sequence[Mapping[str, Any]],
         client: httpx.Client | None = None) -> str:
    """Send one chat completion; retry 429/5xx/timeouts with backoff; return the text."""
    headers = {"Content-Type": "application/json", "Accept-Encoding": accepted_encodings()}
    if endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    payload = {
        "model": endpoint.model,
        "messages": list(messages),
        "max_tokens": endpoint.max_tokens,
        "temperature": endpoint.temperature,
    }
    url = f"{endpoint.base_url}/chat/completions"
    owned = client is None
    http = client or api_client(endpoint.timeout_s)
    last = ChatError(f"no answer from {url}")
    try:
        for attempt in range(endpoint.max_retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
            try:
                status, body = _post_capped(http, url, payload, headers, endpoint)
            except httpx.TimeoutException:
                last = ChatError(f"the model endpoint timed out after {endpoint.timeout_s:g}s",
                                 ErrorKind.TOOL_TIMEOUT)
                continue
            except BodyTooLarge as exc:  # not retried: a server that sends this much will again
                raise ChatError(f"the model endpoint's answer was not read: {exc} (max_response_bytes)") from exc
            except httpx.HTTPError as exc:
                last = ChatError(f"cannot reach the model endpoint {url}: {exc}")
                continue
            if status == 429 or status >= 500:
                last = ChatError(f"model endpoint answered HTTP {status}")
                continue
            if status >= 400:
                raise ChatError(f"model endpoint refused the request: HTTP {status} "
                                f"{body[:300].decode('utf-8', 'replace')}")
            try:
                text = _content_text(json.loads(body)["choices"][0]["message"]["content"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise ChatError("model endpoint returned an unexpected body: "
                                f"{body[:300].decode('utf-8', 'replace')}") from exc
            if not text.strip():
                raise ChatError("model endpoint returned an empty answer")
            return text.strip()
        raise last
    finally:
        if owned:
            http.close()
