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


def _dribbling_server(body: bytes, step_s: float) -> tuple[socket.socket, object]:
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"z" * 40
            + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def answer(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client hangs up mid-head
            conn.settimeout(5)
            conn.recv(65536)
            for byte in head:
                conn.sendall(bytes([byte]))
                time.sleep(step_s)
            conn.sendall(body)

    def accept(sock: socket.socket) -> None:
        conn, _ = sock.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()

    return listener, accept


def test_a_search_api_dribbling_its_head_times_out() -> None:
    body = json.dumps({"organic": [{"title": "t", "link": "https://zf.example/", "snippet": "s"}]}).encode()
    listener, accept = _dribbling_server(body, 0.1)  # about 9 s for the head, 0.1 s a byte
    with serve_in_background(listener, accept):
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        result = build_search("serper", base_url=base, api_key="k", timeout_s=1, retries=0).run("q", ToolContext())
    assert not result.ok and result.error_kind == ErrorKind.TOOL_TIMEOUT, result.text


def test_a_chat_endpoint_dribbling_its_head_times_out() -> None:
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "late"}}]}).encode()
    listener, accept = _dribbling_server(body, 0.1)
    with serve_in_background(listener, accept):
        endpoint = ChatEndpoint(base_url=f"http://127.0.0.1:{listener.getsockname()[1]}", model="m",
                                timeout_s=1, max_retries=0)
        with pytest.raises(ChatError, match="timed out") as raised:
            chat(endpoint, [{"role": "user", "content": "hi"}])
    assert raised.value.kind == ErrorKind.TOOL_TIMEOUT
