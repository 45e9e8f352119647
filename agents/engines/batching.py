"""Merge concurrent callers of a local engine into shared batches.

A rollout runner drives one episode per thread and a server answers one request per
connection, but a local model is fastest when it decodes many sequences per forward pass.
:class:`BatchingEngine` queues requests from any thread and a single worker feeds them to
the engine. An engine with a ``serve(take)`` loop (the ``hf`` engine) pulls queued
requests between its decode steps, so a request joins the running batch at once and its
caller is answered the moment it finishes (continuous batching); other engines get
whatever has queued as one ``generate`` call (while it ran, more requests arrive).
Requests keep their own ``SamplingParams`` (seed included), so results do not depend on
who shared the batch.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from agents.engines import Completion, Engine, EngineErrorKind, GenerationRequest, SamplingParams

__all__ = ["BatchingEngine"]


class BatchingEngine:
    """Wraps ``engine``; thread-safe; ``close()`` stops the worker thread."""

    def __init__(self, engine: Engine, max_batch_size: int = 32, max_wait_s: float = 0.002):
        self.engine = engine
        self.name = engine.name
        self.tokenizer = getattr(engine, "tokenizer", None)
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.batch_sizes: list[int] = []  # observability: how well requests were merged
        self._queue: queue.Queue[tuple[GenerationRequest, Future[Completion]] | None] = (
            queue.Queue())
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="coa-batcher", daemon=True)
        self._worker.start()

    def __getattr__(self, name: str) -> Any:  # encode(), max_context… of the wrapped engine
        return getattr(self.engine, name)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Completion]:
        futures = [self.submit(request, params) for request in requests]
        return [f.result() for f in futures]

    def submit(self, request: GenerationRequest, params: SamplingParams | None = None) -> Future[Completion]:
        """Queue one request without waiting: the future resolves to its completion. An asyncio
        server awaits ``asyncio.wrap_future(...)`` instead of parking a thread per request."""
        if self._closed:
            raise RuntimeError("BatchingEngine is closed")
        future: Future[Completion] = Future()
        resolved = request if request.params else dataclasses.replace(request, params=params or SamplingParams())
        self._queue.put((resolved, future))
        return future

    def _run(self) -> None:
        serve = getattr(self.engine, "serve", None)
        if callable(serve):  # continuous batching: the engine pulls requests between steps
            serve(self._take)
            return
        while (batch := self._take(self.max_batch_size, True)) is not None:
            requests = [r for r, _ in batch]
            try:
                default = requests[0].params or SamplingParams()
                completions = self.engine.generate(requests, default)
            except Exception as exc:  # engines should not raise; never strand a caller
                message = f"{type(exc).__name__}: {exc}"
                completions = [Completion.failure(EngineErrorKind.INTERNAL, message)
                               for _ in batch]
            for (_, deliver), completion in zip(batch, completions, strict=True):
                deliver(completion)

    def _take(self, limit: int, block: bool) -> list[tuple[GenerationRequest, Any]] | None:
        """Up to ``limit`` queued requests with their deliver callbacks; None once closed.

        Blocking: wait for the first, then ``max_wait_s`` for a second (callers woken by the
        previous batch resubmit within that window), then take whatever else is queued.
        """
        limit = min(limit, self.max_batch_size)
        batch: list[tuple[GenerationRequest, Future[Completion]]] = []
        if block:
            item = self._queue.get()
            if item is None:
                return None
            batch.append(item)
            try:
                first = self._queue.get(timeout=self.max_wait_s)
                if first is None:
                    self._queue.put(None)
                else:
                    batch.append(first)
            except queue.Empty:
                pass
        while len(batch) < limit:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self._queue.put(None)
                break
            batch.append(more)
        if batch:
            self.batch_sizes.append(len(batch))
        return [(request, future.set_result) for request, future in batch]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._worker.join(timeout=30)
            closer = getattr(self.engine, "close", None)
            if callable(closer):
                closer()
