"""What may reach the ``coa serve-env`` app: the bearer token and the request size.

The token is compared in constant time; a request body over the limit is refused with 413
before anything parses it (a JSON bomb never reaches ``json.loads``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Any

from coa_envs.service.wire import ErrorCode, ServiceError, dumps

__all__ = ["BodyLimit", "authorized"]


def authorized(headers: Mapping[str, str], token: str | None) -> bool:
    if token is None:
        return True
    given = headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 before anything parses it.
    ``refusal(limit)`` is the 413's JSON body (default: this service's error shape; the OpenAI
    servers pass theirs)."""

    def __init__(self, app: Any, limit: int, refusal: Callable[[int], bytes] | None = None):
        self.app, self.limit, self.refusal = app, limit, refusal

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Callable) -> None:
        if self.refusal is not None:
            payload = self.refusal(self.limit)
        else:
            message = f"the request body is over the server's limit of {self.limit} bytes"
            payload = dumps(ServiceError(ErrorCode.TOO_LARGE, message).body()).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
