"""Render a :class:`~coa_envs.miniweb.world.World` as a website of linked pages.

Besides ordinary articles the site has every awkward kind of page a web agent meets: a
page whose text only exists after its JavaScript runs, PDF reports, links that go through
a two-hop redirect chain, a link to a page that does not exist (404), a slow page and a
very large page. Links are site-relative so the same site works on any port.

Some pages are *indexed* (the local search engine knows them, with a short description
that does not give the answers away, like a real result snippet) and some are only
reachable by following links (project pages, PDFs, symposium pages), so tasks need search,
crawl and WebWalker-style link following.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coa_envs.miniweb.pdf import text_pdf
from coa_envs.miniweb.world import World

__all__ = ["HUGE_PAGE_PATH", "JS_PAGE_PATH", "MISSING_PAGE_PATH", "SLOW_PAGE_PATH", "Page",
           "Site", "build_site"]

JS_PAGE_PATH = "/live/buoy.html"
SLOW_PAGE_PATH = "/reports/ledger.html"
HUGE_PAGE_PATH = "/archive/full-log.html"
MISSING_PAGE_PATH = "/news/archive-2019.html"
_HTML = "text/html; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Page:
    """One URL path of the site. A ``location`` makes it a redirect with ``status``."""

    path: str
    title: str
    body: bytes = b""
    content_type: str = _HTML
    status: int = 200
    location: str | None = None
    delay_s: float = 0.0
    indexed: bool = False
    summary: str = ""


@dataclass(frozen=True)
class Site:
    world: World
    pages: dict[str, Page]

    def indexed_pages(self) -> list[Page]:
        return [p for p in self.pages.values() if p.indexed]

    def export_jsonl(self, path: str | Path, base_url: str) -> Path:
        """Write ``{"url", "title", "text"}`` lines for the ``local`` web_search backend."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", encoding="utf-8") as handle:
            for page in self.indexed_pages():
                record = {"url": base_url.rstrip("/") + page.path, "title": page.title,
                          "text": page.summary}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return target


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _document(title: str, description: str, body: str, site_name: str) -> bytes:
    nav = ('<nav><a href="/">Home</a> · <a href="/about.html">About</a> · '
           '<a href="/departments/index.html">Departments</a> · <a href="/people/index.html">People</a>'
           ' · <a href="/reports/index.html">Reports</a> · <a href="/events/index.html">Events</a> · '
           '<a href="/news/index.html">News</a></nav>')
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f'<meta name="description" content="{_e(description)}"></head>\n<body>{nav}\n'
        f"<main><article><h1>{_e(title)}</h1>\n{body}\n</article></main>\n"
        f"<footer><p>{_e(site_name)} · an invented organisation of the coa-envs mini-web.</p>"
        f"</footer></body></html>\n"
    ).encode()


def _link(path: str, text: str) -> str:
    return f'<a href="{_e(path)}">{_e(text)}</a>'


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>"


def _euros(amount: int) -> str:
    return f"{amount:,} euros"


def build_site(world: World, *, slow_delay_s: float = 1.0, huge_page_bytes: int = 1_200_000) -> Site:
    """All pages of the world's website, keyed by path."""
    w, pages = world, {}
    name = w.institute

    def add(path: str, title: str, body: str, summary: str = "", indexed: bool = True,
            delay_s: float = 0.0) -> None:
        description = summary or title
        pages[path] = Page(path, title, _document(title, description, body, name),
                           indexed=indexed, summary=summary or title, delay_s=delay_s)

    add("/", name,
        f"<p>Welcome to the {_e(name)} in {_e(w.city)}. We study the sea, its edges and the "
        f"instruments that listen to it.</p>"
        + _list([_link("/about.html", "About the institute"),
                 _link("/departments/index.html", "Our departments"),
                 _link("/people/index.html", "Staff directory"),
                 _link("/reports/index.html", "Annual reports"),
                 _link("/events/index.html", "Events and symposia"),
                 _link(JS_PAGE_PATH, "Live buoy dashboard"),
                 _link(HUGE_PAGE_PATH, "Instrument log archive")]),
        summary=f"Home page of the {name}, a research institute in {w.city}.")
    add("/about.html", f"About the {name}",
        f"<p>The {_e(name)} was founded in {w.founded} by {_e(w.founder)} in {_e(w.city)}. It "
        f"began as a single tide-gauge hut on the harbour wall and grew into "
        f"{len(w.departments)} departments.</p><p>The institute is funded by public grants and "
        f"by partners such as {_e(w.projects[0].partner)}.</p>",
        summary=f"History and mission of the {name}: who founded it and when.")

    dept_items = [_link(f"/departments/{d.slug}.html", f"{d.name} department") for d in w.departments]
    add("/departments/index.html", f"Departments of the {w.short_name}",
        f"<p>The {_e(name)} has {len(w.departments)} departments.</p>" + _list(dept_items),
        summary=f"List of the departments of the {name}.")
    for dept in w.departments:
        head = w.person(dept.head)
        project_items = []
        for slug in dept.projects:
            project = w.project(slug)
            project_items.append(_link(f"/projects/{slug}.html", project.name)
                                 + f", led by {_e(w.person(project.lead).name)}")
        staff = [p for p in w.people if p.department == dept.name]
        add(f"/departments/{dept.slug}.html", f"{dept.name} department",
            f"<p>The {_e(dept.name)} department of the {_e(name)} was established in "
            f"{dept.founded}. It is headed by {_link(f'/people/{head.slug}.html', head.name)}.</p>"
            f"<p>Current projects of the department:</p>" + _list(project_items)
            + "<p>Staff:</p>" + _list([_link(f"/people/{p.slug}.html", p.name) for p in staff]),
            summary=f"The {dept.name} department of the {name}: its head, staff and projects.")

    add("/people/index.html", f"Staff directory of the {w.short_name}",
        "<p>Everyone who works at the institute, by name.</p>"
        + _list([_link(f"/people/{p.slug}.html", p.name) for p in w.people]),
        summary=f"Staff directory of the {name}.")
    for person in w.people:
        dept = next(d for d in w.departments if d.name == person.department)
        add(f"/people/{person.slug}.html", f"{person.name}",
            f"<p>{_e(person.name)} is a {_e(person.role)} in the "
            f"{_link(f'/departments/{dept.slug}.html', person.department)} department. "
            f"{_e(person.name.split()[0])} joined the {_e(name)} in {person.joined}, coming from "
            f"{_e(person.hometown)}.</p><p>Office: room {person.office}, main building.</p>",
            summary=f"Staff profile of {person.name}, {person.role} in the {person.department} "
                    f"department of the {name}.")

    for project in w.projects:
        lead = w.person(project.lead)
        dept = next(d for d in w.departments if d.name == project.department)
        add(f"/projects/{project.slug}.html", project.name,
            f"<p>{_e(project.name)} is a project of the "
            f"{_link(f'/departments/{dept.slug}.html', project.department)} department, led by "
            f"{_link(f'/people/{lead.slug}.html', lead.name)}.</p><p>It started in "
            f"{project.started} with an approved budget of {_euros(project.budget_eur)}, in "
            f"partnership with {_e(project.partner)}.</p>",
            indexed=False)

    _add_awkward_pages(w, add, pages, slow_delay_s=slow_delay_s, huge_page_bytes=huge_page_bytes)
    return Site(world=w, pages=pages)


def _add_awkward_pages(w: World, add: Callable[..., None], pages: dict[str, Page], *, slow_delay_s: float,
                       huge_page_bytes: int) -> None:
    """The pages a crawler must survive: PDF reports, a slow ledger, redirect chains to the
    symposia, a missing newsletter, a JavaScript-rendered dashboard and a huge log."""
    name = w.institute
    report_items = [_link(f"/files/annual-report-{r.year}.pdf", f"Annual report {r.year} (PDF)")
                    for r in w.reports]
    add("/reports/index.html", f"Annual reports of the {w.short_name}",
        "<p>Each year the institute publishes a short report with its key figures.</p>"
        + _list(report_items) + f"<p>See also the {_link(SLOW_PAGE_PATH, 'equipment ledger')}.</p>",
        summary=f"Annual reports of the {name}, {w.reports[0].year} to {w.reports[-1].year}, "
                f"with key figures, as PDF downloads.")
    for report in w.reports:
        pdf = text_pdf([f"{name}", f"Annual report {report.year}",
                        f"In {report.year} the institute welcomed {report.visitors:,} visitors.",
                        f"Staff published {report.publications} peer-reviewed papers.",
                        f"Research vessels spent {report.vessel_days} days at sea."],
                       title=f"Annual report {report.year}")
        path = f"/files/annual-report-{report.year}.pdf"
        pages[path] = Page(path, f"Annual report {report.year}", pdf, "application/pdf")
    add(SLOW_PAGE_PATH, f"Equipment ledger of the {w.short_name}",
        f"<p>The equipment ledger of the {_e(name)} lists {w.ledger_entries} items, from "
        f"hydrophones to rowing boats.</p>",
        summary=f"Equipment ledger of the {name}: how many items it lists.", delay_s=slow_delay_s)

    event_items = [_link(f"/events/symposium-{s.year}.php", f"{s.year} Symposium") for s in w.symposia]
    add("/events/index.html", f"Events at the {w.short_name}",
        "<p>Every year the institute hosts a symposium on coastal science.</p>" + _list(event_items),
        summary=f"Events of the {name}, including its annual symposium: where it is held.")
    for symposium in w.symposia:
        old, middle = f"/events/symposium-{symposium.year}.php", f"/events/{symposium.year}/symposium"
        final = f"/events/symposium-{symposium.year}.html"
        pages[old] = Page(old, "moved", status=301, location=middle)
        pages[middle] = Page(middle, "moved", status=302, location=final)
        keynote = w.person(symposium.keynote)
        add(final, f"{symposium.year} Symposium of the {w.short_name}",
            f"<p>The {symposium.year} Symposium of the {_e(name)} takes place in "
            f"{_e(symposium.city)}, at {_e(symposium.venue)}. The keynote lecture is given by "
            f"{_link(f'/people/{keynote.slug}.html', keynote.name)}.</p>", indexed=False)

    add("/news/index.html", f"News from the {w.short_name}",
        f"<p>Our newsletter archive before 2020 is {_link(MISSING_PAGE_PATH, 'here')}. Recent "
        f"news: the {_link(JS_PAGE_PATH, 'buoy dashboard')} now updates live.</p>",
        summary=f"News and newsletter archive of the {name}.")

    message = (f"Latest reading: the deep-water buoy of the {name} reports a maximum wave height "
               f"of {w.buoy_wave_height_m} metres.")
    codes = ",".join(str(ord(ch)) for ch in message)  # the sentence is not in the raw HTML
    pages[JS_PAGE_PATH] = Page(
        JS_PAGE_PATH, "Live buoy dashboard",
        ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Live buoy "
         "dashboard</title></head><body><main><article><h1>Live buoy dashboard</h1>"
         "<p id=\"reading\">Loading the latest reading…</p></article></main><script>"
         f"document.getElementById('reading').textContent = String.fromCharCode({codes});"
         "</script></body></html>\n").encode(),
        indexed=True, summary=f"Live dashboard of the {name}'s deep-water buoy (wave height).")

    line = "<p>Log line {n:06d}: routine instrument check completed, all readings nominal.</p>\n"
    filler, n = [], 0
    size = 0
    while size < huge_page_bytes:
        text = line.format(n=n)
        filler.append(text)
        size += len(text)
        n += 1
    add(HUGE_PAGE_PATH, f"Instrument log archive of the {w.short_name}",
        f"<p>The archive's first entry was written in {w.founded + 1}; it holds {n} lines.</p>"
        + "".join(filler),
        summary=f"The complete instrument log archive of the {name} (very long).")
