"""The ``miniweb`` family: questions about the offline mini-web (``coa/MiniWeb-v0``).

The site's port is chosen by the OS, so tasks (whose oracle scripts hold absolute URLs)
and tools (the search index file, the crawl allow-list) can only be configured once the
server runs. This module therefore offers the env a *family runtime*:
:func:`open_runtime` starts (or joins) the process's shared mini-web server and returns
the loader options (``base_url``) and tool overrides (``web_search.path`` = the exported
page index, ``crawl_page.allow_hosts`` = the server's ``host:port`` only) the env merges into its
config; the env's ``close()`` closes the runtime and the last user stops the server.

To run the tasks against a server you started yourself (``with coa_envs.miniweb.serve()
as web``), pass ``gym.make("coa/MiniWeb-v0", **make_kwargs(web))``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from coa_envs.miniweb.pool import build_pool_tasks, spread_kinds, subject_heldout
from coa_envs.miniweb.server import MiniWebServer, acquire_shared, release_shared
from coa_envs.miniweb.tasks import KINDS, build_tasks
from coa_envs.miniweb.world import SIZES, make_world
from coa_envs.tasks.hygiene import gaia, refuse_empty_golds
from coa_envs.tasks.split import POOL_NOTE, check_split, partition
from coa_envs.tasks.web_common import select_tasks
from coa_envs.types import Task

__all__ = ["SPLIT_NOTE", "MiniWebRuntime", "load_tasks", "make_kwargs", "open_runtime"]

SPLIT_NOTE = POOL_NOTE
"""What ``coa list`` says about this family's ``split`` option (:mod:`coa_envs.tasks.split`)."""

_SERVER_OPTIONS = ("slow_delay_s", "huge_page_bytes", "port", "world")


def load_tasks(
    path: str | None = None,
    *,
    seed: int = 0,
    base_url: str | None = None,
    include_js: bool = False,
    kinds: list[str] | None = None,
    limit: int | None = None,
    slow_delay_s: float = 1.0,
    huge_page_bytes: int = 1_200_000,
    port: int = 0,
    split: str = "all",
    world: str = "small",
) -> list[Task]:
    """Tasks for the world of ``seed`` served at ``base_url``.

    ``world``: ``small`` (coa/MiniWeb-v0: 13 questions, split by question) or ``large``
    (coa/MiniWebLarge-v0: 372 questions of :data:`~coa_envs.miniweb.pool.POOL_KINDS`, split
    by the entity they ask about, :mod:`coa_envs.miniweb.pool`).

    Without ``base_url`` (a direct call, outside an env) the process's shared server for
    ``seed`` is started and stays up until the process ends. ``include_js`` adds tasks that
    only a browser backend can solve; ``kinds`` keeps only some task kinds. ``port`` fixes
    the server's port (default: the OS picks one), so that task URLs — and the keys of a
    record/replay tool cache — are the same in every process. ``split`` (train/test/all)
    is the fixed hashed 80/20 partition of :mod:`coa_envs.tasks.split`.
    """
    if path is not None:
        raise ValueError("coa/MiniWeb-v0 generates its tasks from `seed`; it reads no data_path")
    if kinds is not None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"kinds={sorted(unknown)} are not valid; allowed: {list(KINDS)}")
    _check_port(port)
    if world not in SIZES:
        raise ValueError(f"world={world!r} is not valid; allowed: {sorted(SIZES)}")
    if world != "small" and (include_js or kinds is not None):
        raise ValueError("include_js and kinds choose among the small world's questions; the large "
                         "world's pool has its own kinds (coa_envs.miniweb.pool.POOL_KINDS)")
    if base_url is None:
        base_url = acquire_shared(seed, slow_delay_s=slow_delay_s, huge_page_bytes=huge_page_bytes,
                                  port=port, world=world).base_url
    if world == "large":
        check_split(split, "coa/MiniWebLarge-v0")
        tasks = [t for t in build_pool_tasks(make_world(seed, size=world), base_url)
                 if split == "all" or subject_heldout(t.metadata["subject"]) == (split == "test")]
        return select_tasks(spread_kinds(refuse_empty_golds(tasks, gaia, "miniweb large")), limit)
    tasks = build_tasks(make_world(seed), base_url, include_js=include_js)
    if kinds is not None:
        tasks = [t for t in tasks if t.metadata["kind"] in kinds]
    return select_tasks(partition(refuse_empty_golds(tasks, gaia, "miniweb"), split, "coa/MiniWeb-v0"), limit)


def _check_port(port: Any) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port={port!r} is not valid; allowed: 0 (any free port) or 1-65535")


def _tool_overrides(base_url: str, pages_path: str | None) -> dict[str, dict[str, Any]]:
    # Open exactly this server (host and port) to the crawler; the rest of loopback stays shut.
    parts = urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"
    endpoint = f"[{host}]:{parts.port or 80}" if ":" in host else f"{host}:{parts.port or 80}"
    crawl: dict[str, Any] = {"allow_hosts": [endpoint]}
    try:  # the site lives at an IP literal: no name can be on it, so never send a DNS query either
        ipaddress.ip_address(host)
        crawl["resolve_dns"] = False
    except ValueError:
        pass
    overrides: dict[str, dict[str, Any]] = {"crawl_page": crawl}
    if pages_path is not None:
        overrides["web_search"] = {"path": pages_path}
    return overrides


@dataclass
class MiniWebRuntime:
    """What the env merges into its config while the mini-web serves its tasks."""

    task_options: dict[str, Any]
    tool_overrides: dict[str, dict[str, Any]]
    server: MiniWebServer | None = None
    _closed: bool = field(default=False, repr=False)

    def close(self) -> None:
        if self.server is not None and not self._closed:
            self._closed = True
            release_shared(self.server)


def open_runtime(options: Mapping[str, Any]) -> MiniWebRuntime:
    """Start or join the shared server for ``options`` (unless ``base_url`` names one)."""
    if options.get("base_url"):
        # An external server: the caller configures web_search.path itself (make_kwargs).
        return MiniWebRuntime({}, _tool_overrides(str(options["base_url"]), None))
    port = options.get("port", 0)
    _check_port(port)
    try:
        server = acquire_shared(
            int(options.get("seed", 0)),
            **{k: options[k] for k in _SERVER_OPTIONS if k in options},
        )
    except OSError as exc:
        raise OSError(f"cannot serve the mini-web on 127.0.0.1:{port} ({exc}); choose another "
                      "task_options.port or 0 for any free port") from exc
    return MiniWebRuntime({"base_url": server.base_url},
                          _tool_overrides(server.base_url, str(server.pages_jsonl)), server)


def make_kwargs(server: MiniWebServer, **task_options: Any) -> dict[str, Any]:
    """``gym.make`` options that point ``coa/MiniWeb-v0`` at a server you manage."""
    return {
        "task_options": {"seed": server.site.world.seed, "base_url": server.base_url,
                         **task_options},
        "tools": _tool_overrides(server.base_url, str(server.pages_jsonl)),
    }
