"""Replies that notice when their HTTP client hangs up (``coa serve`` and the gateway).

Why: uvicorn speaks ASGI 2.3, so Starlette's ``StreamingResponse`` stops sending when the
client disconnects by cancelling the task that iterates the stream. What the stream holds
is then released only when the garbage collector finalises its generator, if ever: a stream
that never started (the client left before the first byte) never runs its cleanup at all, and
an ``await`` in a ``finally`` under the cancelled scope is cancelled again. The engine went on
decoding for nobody, and a gateway call stayed counted in flight until the idle timeout.

:func:`event_stream` closes its generator and runs ``on_close`` whatever way the response
ends, shielded from that cancellation; :func:`unless_disconnected` runs a non-streamed reply's
work and cancels it (which cancels its engine requests) when the client disconnects first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

__all__ = ["event_stream", "interleaved", "unless_disconnected"]

T = TypeVar("T")

#: The status logged for a reply its client did not wait for (nginx's "client closed request").
CLIENT_CLOSED = 499


def event_stream(events: AsyncIterator[str], *, headers: Mapping[str, str] | None = None,
                 on_close: Callable[[], Awaitable[None]] | None = None) -> Any:
    """A ``text/event-stream`` response of ``events``: when it ends (sent, failed or the client
    gone, even before the first event) ``events`` is closed, so its ``finally`` runs, then
    ``on_close`` is awaited."""
    from starlette.responses import StreamingResponse

    class _ClosingStream(StreamingResponse):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            try:
                await super().__call__(scope, receive, send)
            finally:
                await _shielded(self._close)

        async def _close(self) -> None:
            try:
                await events.aclose()  # type: ignore[attr-defined]
            finally:
                if on_close is not None:
                    await on_close()

    return _ClosingStream(events, media_type="text/event-stream", headers=dict(headers or {}))


async def _shielded(close: Callable[[], Awaitable[None]]) -> None:
    import anyio

    with anyio.CancelScope(shield=True):
        await close()


async def unless_disconnected(request: Any, work: Awaitable[T]) -> T | Any:
    """``await work``, unless the client behind ``request`` disconnects first: then ``work`` is
    cancelled (so are the engine requests it made) and an empty 499 reply, which nobody
    reads, is returned."""
    from starlette.responses import Response

    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.wait({task})
    return Response(status_code=CLIENT_CLOSED)


async def _disconnect(request: Any) -> None:
    """Returns once the client has gone (the request body is read already, so the next ASGI
    message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def interleaved(streams: list[AsyncIterator[str]]) -> AsyncIterator[str]:
    """Every stream's events as they come. Closed early, every stream is closed (each cancels
    its generation)."""
    events: asyncio.Queue[str | None] = asyncio.Queue()

    async def pump(stream: AsyncIterator[str]) -> None:
        try:
            async for event in stream:
                events.put_nowait(event)
        finally:
            events.put_nowait(None)

    tasks = [asyncio.create_task(pump(stream)) for stream in streams]
    try:
        running = len(tasks)
        while running:
            event = await events.get()
            if event is None:
                running -= 1
            else:
                yield event
        for task in tasks:
            task.result()  # a choice that failed outside its error event
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # each stream's cleanup runs now
