"""A search or chat endpoint that sends its response head a byte at a time, each byte inside the
per-read timeout, is cut at the tool's timeout_s (httpx's timeouts bound one read each)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest

from coa_envs.tools.web_search import build as build_search
from coa_envs.types import ErrorKind, ToolContext
from coa_envs.web.llm import ChatEndpoint, ChatError, chat
from tests.web_tools.listeners import serve_in_background


def _dribbling_server(body: bytes, step_s: float, sent: list[int]) -> tuple[socket.socket, object]:
    """A server sending its head a byte every ``step_s`` (about 35 s in all); ``sent`` gets how
    many head bytes each connection took before its client hung up."""
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"z" * 300
            + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def answer(conn: socket.socket) -> None:
        count = 0
        with conn, contextlib.suppress(OSError):  # the client hangs up mid-head
            conn.settimeout(5)
            conn.recv(65536)
            for byte in head:
                conn.sendall(bytes([byte]))
                count += 1
                time.sleep(step_s)
            conn.sendall(body)
        sent.append(count if count < len(head) else -1)

    def accept(sock: socket.socket) -> None:
        conn, _ = sock.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()

    return listener, accept


def _wait_for(sent: list[int]) -> None:
    """Until the server thread noticed the hang-up (its next byte fails), 10 s at most."""
    for _ in range(100):
        if sent:
            return
        time.sleep(0.1)


def test_a_search_api_dribbling_its_head_times_out() -> None:
    body = json.dumps({"organic": [{"title": "t", "link": "https://zf.example/", "snippet": "s"}]}).encode()
    sent: list[int] = []
    listener, accept = _dribbling_server(body, 0.1, sent)
    with serve_in_background(listener, accept):
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        result = build_search("serper", base_url=base, api_key="k", timeout_s=1, retries=0).run("q", ToolContext())
        _wait_for(sent)
    assert not result.ok and result.error_kind == ErrorKind.TOOL_TIMEOUT, result.text
    assert sent[0] != -1  # hung up mid-head (before: waited for all of it, then timed out)


def test_a_chat_endpoint_dribbling_its_head_times_out() -> None:
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "late"}}]}).encode()
    sent: list[int] = []
    listener, accept = _dribbling_server(body, 0.1, sent)
    with serve_in_background(listener, accept):
        endpoint = ChatEndpoint(base_url=f"http://127.0.0.1:{listener.getsockname()[1]}", model="m",
                                timeout_s=1, max_retries=0)
        with pytest.raises(ChatError, match="timed out") as raised:
            chat(endpoint, [{"role": "user", "content": "hi"}])
        _wait_for(sent)
    assert raised.value.kind == ErrorKind.TOOL_TIMEOUT and sent[0] != -1
