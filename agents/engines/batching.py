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
import inspect
import logging
import queue
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from agents.engines import Completion, Engine, EngineErrorKind, GenerationRequest, SamplingParams

__all__ = ["BatchingEngine"]

log = logging.getLogger(__name__)


class _Intake:
    """The request queue the worker reads, apart from :class:`BatchingEngine` so that the worker
    thread holds no reference to the wrapper (it can be garbage-collected, which stops the
    worker). ``take`` is what an engine's ``serve`` loop pulls from."""

    def __init__(self, max_batch_size: int, max_wait_s: float) -> None:
        self.max_batch_size, self.max_wait_s = max_batch_size, max_wait_s
        self.queue: queue.Queue[tuple[GenerationRequest, Future[Completion]] | None] = queue.Queue()
        self.closing = threading.Event()
        self.batch_sizes: list[int] = []  # observability: how well requests were merged

    def take(self, limit: int, block: bool) -> list[tuple[GenerationRequest, Any]] | None:
        """Up to ``limit`` queued requests with their deliver callbacks; None once closed.

        Blocking: wait for the first, then ``max_wait_s`` for a second (callers woken by the
        previous batch resubmit within that window), then take whatever else is queued.
        """
        if self.closing.is_set():  # answer whatever is still queued, then report closed
            while True:
                try:
                    item = self.queue.get_nowait()
                except queue.Empty:
                    return None
                if item is not None and item[1].set_running_or_notify_cancel():
                    item[1].set_result(Completion.failure(EngineErrorKind.INTERNAL, _CLOSED))
        limit = min(limit, self.max_batch_size)
        batch: list[tuple[GenerationRequest, Future[Completion]]] = []
        if block:
            item = self.queue.get()
            if item is None:
                return None
            batch.append(item)
            try:
                first = self.queue.get(timeout=self.max_wait_s)
                if first is None:
                    self.queue.put(None)
                else:
                    batch.append(first)
            except queue.Empty:
                pass
        while len(batch) < limit:
            try:
                more = self.queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self.queue.put(None)
                break
            batch.append(more)
        # A future its caller cancelled while queued (asyncio.wrap_future cancels it with the
        # awaiting task) is dropped; the rest are marked running, so they cannot be cancelled
        # any more and set_result never meets a cancelled future (which raised in the worker
        # and stopped it for good).
        batch = [(request, future) for request, future in batch if future.set_running_or_notify_cancel()]
        if batch:
            self.batch_sizes.append(len(batch))
        return [(request, future.set_result) for request, future in batch]


_CLOSED = "the engine was closed"


def _work(engine: Engine, intake: _Intake) -> None:
    """The worker: the engine's own ``serve`` loop (continuous batching), else one
    ``generate`` per batch of whatever has queued."""
    serve = getattr(engine, "serve", None)
    if callable(serve):
        if "stop" in inspect.signature(serve).parameters:
            serve(intake.take, stop=intake.closing)
        else:
            serve(intake.take)
        return
    while (batch := intake.take(intake.max_batch_size, True)) is not None:
        wanted = []
        for request, deliver in batch:  # its caller left while it was queued: sample nothing
            if request.cancelled:
                deliver(Completion(text="", finish_reason="abort"))
            else:
                wanted.append((request, deliver))
        batch = wanted
        if not batch:
            continue
        requests = [r for r, _ in batch]
        try:
            default = requests[0].params or SamplingParams()
            completions = engine.generate(requests, default)
        except Exception as exc:  # engines should not raise; never strand a caller
            message = f"{type(exc).__name__}: {exc}"
            completions = [Completion.failure(EngineErrorKind.INTERNAL, message) for _ in batch]
        for (_, deliver), completion in zip(batch, completions, strict=True):
            deliver(completion)


class BatchingEngine:
    """Wraps ``engine``; thread-safe; ``close()`` stops the worker thread (so do garbage
    collection and interpreter exit)."""

    def __init__(self, engine: Engine, max_batch_size: int = 32, max_wait_s: float = 0.002):
        self.engine = engine
        self.name = engine.name
        self.tokenizer = getattr(engine, "tokenizer", None)
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self._intake = _Intake(max_batch_size, max_wait_s)
        self.batch_sizes = self._intake.batch_sizes
        self._closed = False
        self._worker = threading.Thread(target=_work, args=(engine, self._intake), name="coa-batcher", daemon=True)
        self._worker.start()
        # Stopped by close(), on garbage collection and at interpreter exit: a worker still
        # inside a forward pass when Python finalizes is killed mid-C++ ("terminate called
        # without an active exception", an abort instead of the command's exit status).
        self._stop = weakref.finalize(self, _stop_worker, self._intake, self._worker, engine)

    def __getattr__(self, name: str) -> Any:  # encode(), max_context… of the wrapped engine
        return getattr(self.engine, name)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Completion]:
        futures = [self.submit(request, params) for request in requests]
        return [self._wait(f) for f in futures]

    def submit(self, request: GenerationRequest, params: SamplingParams | None = None) -> Future[Completion]:
        """Queue one request without waiting: the future resolves to its completion (an error
        completion if the engine is closed first). An asyncio server awaits
        ``asyncio.wrap_future(...)`` instead of parking a thread per request."""
        if self._closed:
            raise RuntimeError("BatchingEngine is closed")
        future: Future[Completion] = Future()
        resolved = request if request.params else dataclasses.replace(request, params=params or SamplingParams())
        self._intake.queue.put((resolved, future))
        if not self._worker.is_alive():  # closed between the check and the put: never strand it
            self._intake.take(0, False)
        return future

    def _wait(self, future: Future[Completion]) -> Completion:
        """The completion, or an error once the worker is gone (closed while this was queued)."""
        while True:
            try:
                return future.result(timeout=1.0)
            except FutureTimeout:
                if not self._worker.is_alive():
                    return Completion.failure(EngineErrorKind.INTERNAL, _CLOSED)

    def close(self) -> None:
        """Stop the worker: a request still decoding is answered with an error at the next
        step (the engine's ``serve`` loop stops when told), so this waits one step at most."""
        self._closed = True
        self._stop()


_JOIN_S = 120.0  # one decode step on a loaded CPU, with a wide margin; never forever


def _stop_worker(intake: _Intake, worker: threading.Thread, engine: Any) -> None:
    intake.closing.set()
    intake.queue.put(None)  # wakes a worker blocked waiting for the first request
    if worker is not threading.current_thread():
        worker.join(timeout=_JOIN_S)
        if worker.is_alive():
            log.warning("the batching worker did not stop within %.0f s", _JOIN_S)
    closer = getattr(engine, "close", None)
    if callable(closer):
        closer()
