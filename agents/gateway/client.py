"""What an external agent is given, and how one plays a session from start to score.

An *agent callable* is any ``fn(task: AgentTask) -> str | None``: it talks to the model at
``task.base_url`` with whatever client it likes (``task.openai_client()``, smolagents'
``OpenAIServerModel``, LangChain), may use the env's tools through :meth:`AgentTask.call_tool`,
and returns its final answer (None: it gave none). ``coa train rl`` with ``rollout.agent`` set
calls it once per episode (:mod:`trainers.rl.external`); :func:`open_task` and
:meth:`AgentTask.finish` let a script drive a gateway the same way over HTTP.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["AgentFn", "AgentTask", "load_callable", "open_task"]


@dataclass(frozen=True)
class AgentTask:
    """One session handed to an agent: where the model is, and the task when it plays a coa env."""

    base_url: str
    """The OpenAI base URL of this session (``http://host:port/sessions/<id>/v1``)."""
    model: str
    session_id: str
    gateway_url: str
    question: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The env's own prompt (system + user) for agents that want it; most use ``question``."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """The env's tools as OpenAI ``tools`` entries; call them with :meth:`call_tool`."""
    env_id: str = ""
    task_id: str = ""
    max_turns: int = 0
    api_key: str = "EMPTY"

    def openai_client(self, **options: Any) -> Any:
        """An ``openai.OpenAI`` client for this session (no retries: a retried call would be a
        second sample of the same turn)."""
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, **{"max_retries": 0, **options})

    def call_tool(self, name: str, arguments: Mapping[str, Any] | str) -> str:
        """Run the env tool ``name``; returns its text, or the reason the call was refused
        (unknown tool, bad arguments), which an agent shows its model like any tool result."""
        import httpx

        response = httpx.post(f"{self.gateway_url}/sessions/{self.session_id}/tools/{name}",
                              json={"arguments": arguments}, timeout=600)
        if response.status_code == 400:
            return f"Error: {response.json()['error']['message']}"
        response.raise_for_status()
        return str(response.json()["content"])

    def finish(self, answer: str | None = None, *, error: str | None = None) -> dict[str, Any]:
        """Submit the final answer (over HTTP); returns the session's outcome (reward, status)."""
        import httpx

        response = httpx.post(f"{self.gateway_url}/sessions/{self.session_id}/finish",
                              json={"answer": answer, "error": error}, timeout=600)
        response.raise_for_status()
        return response.json()


AgentFn = Callable[[AgentTask], "str | None"]


def open_task(gateway_url: str, *, env_id: str | None = None, task_id: str | None = None,
              task_index: int | None = None, seed: int | None = None, env_kwargs: Mapping[str, Any] | None = None,
              session_id: str | None = None, api_key: str = "EMPTY") -> AgentTask:
    """Open a session on a running gateway (``POST /sessions``) and describe it as a task."""
    import httpx

    body = {key: value for key, value in {"env_id": env_id, "task_id": task_id, "task_index": task_index,
                                          "seed": seed, "env_kwargs": env_kwargs, "session_id": session_id}.items()
            if value is not None}
    response = httpx.post(f"{gateway_url.rstrip('/')}/sessions", json=body, timeout=600)
    if response.status_code >= 400:
        raise RuntimeError(f"opening a session failed ({response.status_code}): {response.text[:500]}")
    return task_from_reply(response.json(), gateway_url, api_key)


def task_from_reply(reply: Mapping[str, Any], gateway_url: str, api_key: str = "EMPTY") -> AgentTask:
    """The task a ``POST /sessions`` reply (or :meth:`Gateway.describe_session`) describes."""
    return AgentTask(base_url=reply["base_url"], model=reply["model"], session_id=reply["session_id"],
                     gateway_url=gateway_url.rstrip("/"), question=reply.get("question", ""),
                     messages=list(reply.get("messages") or []), tools=list(reply.get("tools") or []),
                     env_id=reply.get("env_id", ""), task_id=reply.get("task_id", ""),
                     max_turns=int(reply.get("max_turns") or 0), api_key=api_key)


def load_callable(spec: str, kwargs: Mapping[str, Any] | None = None, what: str = "agent") -> Callable[..., Any]:
    """``module:function`` or ``path/to/file.py:function`` -> the callable (with ``kwargs``
    bound), so a config names an agent (or a reward function) without it being an installed
    package."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise ValueError(f"{what} {spec!r}: write module:function or path/to/file.py:function")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ValueError(f"{what} {spec!r}: no file {where}")
        module_spec = importlib.util.spec_from_file_location(f"coa_agent_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        module = importlib.import_module(where)
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"{what} {spec!r}: {where} has no callable {name!r}")
    return functools.partial(function, **dict(kwargs)) if kwargs else function
