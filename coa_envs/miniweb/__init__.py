"""The offline mini-web: a seeded fictional website served over real HTTP on 127.0.0.1.

It lets the web tools (search, crawl with httpx or a browser) and the ``coa/MiniWeb-v0``
tasks run end to end with no internet: :func:`make_world` draws the facts,
:func:`build_site` renders them as linked pages (plus a JavaScript page, PDFs, a redirect
chain, a 404, a slow and a huge page), :func:`serve` serves them and exports the search
index, :func:`build_tasks` writes questions with oracle action scripts.
"""

from coa_envs.miniweb.server import MiniWebServer, acquire_shared, release_shared, serve, start
from coa_envs.miniweb.site import (
    HUGE_PAGE_PATH,
    JS_PAGE_PATH,
    MISSING_PAGE_PATH,
    SLOW_PAGE_PATH,
    Page,
    Site,
    build_site,
)
from coa_envs.miniweb.tasks import KINDS, build_tasks
from coa_envs.miniweb.world import World, make_world

__all__ = [
    "HUGE_PAGE_PATH",
    "JS_PAGE_PATH",
    "KINDS",
    "MISSING_PAGE_PATH",
    "SLOW_PAGE_PATH",
    "MiniWebServer",
    "Page",
    "Site",
    "World",
    "acquire_shared",
    "build_site",
    "build_tasks",
    "make_world",
    "release_shared",
    "serve",
    "start",
]
