"""A small OpenAI-compatible chat client (httpx) for page summaries and multimodal questions.

We talk to ``POST {base_url}/chat/completions`` directly instead of depending on the
``openai`` package: the web tools need one call shape, explicit timeouts and retries, and
errors mapped to :class:`ErrorKind`. Any server that speaks the API works (vLLM, SGLang,
``coa serve``, hosted providers).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from coa_envs.types import ErrorKind

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

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> ChatEndpoint | None:
        """Build from a tool's config block; None when no ``base_url``/``model`` is set.

        Keys: ``base_url``, ``model``, ``api_key`` or ``api_key_env`` (default
        ``OPENAI_API_KEY``), ``timeout_s``, ``max_retries``, ``max_tokens``, ``temperature``.
        """
        if not config or not config.get("base_url") or not config.get("model"):
            return None
        known = {"base_url", "model", "api_key", "api_key_env", "timeout_s", "max_retries",
                 "max_tokens", "temperature", "max_input_chars"}
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
        )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers return content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def chat(endpoint: ChatEndpoint, messages: Sequence[Mapping[str, Any]],
         client: httpx.Client | None = None) -> str:
    """Send one chat completion; retry 429/5xx/timeouts with backoff; return the text."""
    headers = {"Content-Type": "application/json"}
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
    http = client or httpx.Client(timeout=endpoint.timeout_s, trust_env=False)
    last = ChatError(f"no answer from {url}")
    try:
        for attempt in range(endpoint.max_retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
            try:
                response = http.post(url, json=payload, headers=headers, timeout=endpoint.timeout_s)
            except httpx.TimeoutException:
                last = ChatError(f"the model endpoint timed out after {endpoint.timeout_s:g}s",
                                 ErrorKind.TOOL_TIMEOUT)
                continue
            except httpx.HTTPError as exc:
                last = ChatError(f"cannot reach the model endpoint {url}: {exc}")
                continue
            if response.status_code == 429 or response.status_code >= 500:
                last = ChatError(f"model endpoint answered HTTP {response.status_code}")
                continue
            if response.status_code >= 400:
                raise ChatError(f"model endpoint refused the request: HTTP {response.status_code} "
                                f"{response.text[:300]}")
            try:
                text = _content_text(response.json()["choices"][0]["message"]["content"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise ChatError(f"model endpoint returned an unexpected body: {response.text[:300]}") from exc
            if not text.strip():
                raise ChatError("model endpoint returned an empty answer")
            return text.strip()
        raise last
    finally:
        if owned:
            http.close()
