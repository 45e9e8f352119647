"""Fixtures for teacher-system tests: scripted endpoints on loopback and system files for them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("smolagents", reason="teacher systems are built on smolagents (extra: agents)")
pytest.importorskip("fastapi", reason="the scripted endpoints are FastAPI apps")

from tests.agents.teachers.scripted import Script, ScriptedTeam, serve_scripted


@pytest.fixture
def scripted_server() -> Iterator[Callable[[list[Script]], tuple[ScriptedTeam, str]]]:
    """``start(scripts) -> (team, base_url)``: a live scripted endpoint, stopped after the test."""
    with contextlib.ExitStack() as stack:
        def start(scripts: list[Script]) -> tuple[ScriptedTeam, str]:
            team = ScriptedTeam(scripts)
            return team, stack.enter_context(serve_scripted(team))

        yield start


def system_dict(url: str, *, role_url: str | None = None, members: list[dict[str, Any]] | None = None,
                **sections: Any) -> dict[str, Any]:
    """A system whose agents ask the scripted server as themselves (the request's ``model``);
    ``role_url`` puts the reflector and verifier on a second server."""
    members = members or [{"name": "wiki_agent", "tools": ["wiki_search"]},
                          {"name": "web_agent", "tools": ["web_search", "crawl_page"], "max_steps": 6},
                          {"name": "code_agent", "tools": ["code"]}]
    system: dict[str, Any] = {
        "name": "scripted-team",
        "endpoint": {"base_url": url, "model": "unused", "max_tokens": 300, "timeout_s": 30, "max_retries": 0},
        "manager": {"endpoint": {"model": "manager"}, "planning_interval": 3, "max_steps": 12},
        "tool_agents": [{**member, "endpoint": {"model": member["name"]}} for member in members],
        "reflector": {"endpoint": {"model": "reflector", **({"base_url": role_url} if role_url else {})}},
        "verifier": {"endpoint": {"model": "verifier", **({"base_url": role_url} if role_url else {})}},
    }
    for name, values in sections.items():
        system[name] = {**system.get(name, {}), **values}
    return system


def write_system(path: Path, url: str, **kwargs: Any) -> Path:
    path.write_text(yaml.safe_dump(system_dict(url, **kwargs)), encoding="utf-8")
    return path
