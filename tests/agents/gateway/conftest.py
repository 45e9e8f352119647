"""Gateway test plumbing: a spy around a real engine (what was it fed, what did it sample),
a gateway served on 127.0.0.1, and the token-exactness check every recorded call must pass."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the gateway needs the [serve] extra")
pytest.importorskip("openai", reason="needs the [llm] extra")


class SpyEngine:
    """Delegates to ``engine`` and keeps every (prompt ids, completion) it served."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.name = engine.name
        self.tokenizer = engine.tokenizer
        self.records: list[tuple[tuple[int, ...], Any]] = []
        self._lock = threading.Lock()

    def generate(self, requests, params):
        completions = self.engine.generate(requests, params)
        with self._lock:
            self.records += [(tuple(r.token_ids), c) for r, c in zip(requests, completions, strict=True)]
        return completions


@contextlib.contextmanager
def served_gateway(engine: Any, tokenizer: Any, name: str = "m", *, chat_template: str | None = None,
                   **gateway_kwargs: Any) -> Iterator[tuple[str, Any]]:
    """A gateway over ``engine`` on a free port; yields (base URL, Gateway)."""
    from agents.gateway.app import create_gateway_app
    from agents.gateway.core import Gateway
    from agents.gateway.local import LocalBackend
    from coa_envs.service.running import serve_in_thread

    gateway = Gateway(LocalBackend(engine, tokenizer, chat_template=chat_template), name, **gateway_kwargs)
    with serve_in_thread(create_gateway_app(gateway)) as url:
        yield url, gateway


def assert_token_exact(trajectories: list[Any], records: list[tuple[tuple[int, ...], Any]], tokenizer: Any) -> None:
    """Every engine call appears in exactly one segment: the ids before its generated span are
    the prompt the engine was fed, the span's ids and logprobs are what it sampled, the span's
    text decodes from them, and the loss mask is 1 on exactly those spans."""
    found = []
    for trajectory in trajectories:
        assert trajectory.has_token_ids
        context = list(trajectory.prompt_ids)
        for segment in trajectory.segments:
            if segment.kind == "generated":
                found.append((tuple(context), tuple(segment.token_ids), tuple(segment.logprobs)))
                assert tokenizer.decode(segment.token_ids, skip_special_tokens=False) == segment.text
            context += segment.token_ids
        mask = trajectory.loss_mask()
        assert mask == [int(s.kind == "generated") for s in trajectory.segments for _ in s.token_ids]
    expected = [(prompt, tuple(c.token_ids), tuple(c.logprobs)) for prompt, c in records]
    assert sorted(found) == sorted(expected)
