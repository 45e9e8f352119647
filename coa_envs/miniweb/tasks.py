"""Questions about a mini-web world, each with the CoA action script that solves it.

Every task needs the tools: the answer is never in a search snippet (indexed pages carry a
neutral description), and most answers sit on pages the search engine does not know, so
the agent must crawl a result and follow a link (WebWalker-style), read a PDF, or go
through a redirect chain. ``metadata["oracle_actions"]`` holds the full action strings
(search, crawl the right URLs, answer) with absolute URLs on ``base_url``;
``metadata["oracle_evidence"]`` says, per action, a string its observation must contain
(a URL in the search results, the fact on the crawled page), so tests can prove the
script really works against the real tools instead of only trusting the final answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from coa_envs.miniweb.site import JS_PAGE_PATH, SLOW_PAGE_PATH
from coa_envs.miniweb.world import Symposium, World
from coa_envs.types import Task

__all__ = ["KINDS", "answer_action", "build_tasks", "crawl_action", "founder_question", "search_action",
           "symposium_question"]

KINDS = ("profile", "founder", "head_joined", "project_budget", "report_pdf", "symposium_city",
         "slow_ledger", "js_buoy")


def search_action(thought: str, query: str) -> str:
    return f"<think>\n{thought}\n</think>\n<web_search>{query}</web_search>"


def crawl_action(thought: str, url: str, goal: str) -> str:
    return f"<think>\n{thought}\n</think>\n<crawl_page>{url} | {goal}</crawl_page>"


def answer_action(reason: str, answer: str) -> str:
    return (f"<think>\n{reason}\n</think>\n<double_check>\nThe page states it directly, so the "
            f"answer is {answer}.\n</double_check>\n<answer>{answer}</answer>")


Steps = list[tuple[str, str]]  # (action, a string its observation must contain)


def founder_question(w: World, base: str) -> tuple[str, str, Steps]:
    """``(question, answer, steps)``: who founded the institute (the about page says)."""
    about = f"{base}/about.html"
    return f"Who founded the {w.institute}?", w.founder, [
        (search_action("The institute's history page should name its founder.",
                       f"history {w.short_name} founded"), about),
        (crawl_action("Read the about page.", about, "founder"), w.founder),
        (answer_action(f"The about page names {w.founder} as the founder.", w.founder), ""),
    ]


def symposium_question(w: World, base: str, symposium: Symposium) -> tuple[str, str, Steps]:
    """``(question, answer, steps)``: where a symposium is held (behind a redirect chain)."""
    events_url = f"{base}/events/index.html"
    old_url = f"{base}/events/symposium-{symposium.year}.php"
    return (f"In which town is the {symposium.year} Symposium of the {w.institute} held?",
            symposium.city, [
                (search_action("The events page should list the symposia.",
                               f"{w.short_name} annual symposium events"), events_url),
                (crawl_action("Open the events page.", events_url, f"{symposium.year} symposium"),
                 f"symposium-{symposium.year}.php"),
                (crawl_action("Follow the symposium link (it may redirect).", old_url, "location"),
                 symposium.city),
                (answer_action(f"It takes place in {symposium.city}.", symposium.city), ""),
            ])


def build_tasks(world: World, base_url: str, *, include_js: bool = False) -> list[Task]:
    """All tasks of ``world`` (JavaScript-only tasks only with ``include_js``)."""
    w, base = world, base_url.rstrip("/")
    rng = random.Random(f"miniweb-tasks-{w.seed}")
    tasks: list[Task] = []

    def add(kind: str, question: str, answer: str, steps: list[tuple[str, str]],
            needs_js: bool = False) -> None:
        actions = [action for action, _ in steps]
        evidence = [expected for _, expected in steps]
        number = sum(1 for t in tasks if t.metadata["kind"] == kind)
        tasks.append(Task(
            task_id=f"miniweb-s{w.seed}-{kind}-{number}",
            question=question,
            gold=(answer,),
            metadata={"dataset": "miniweb", "kind": kind, "seed": w.seed, "base_url": base,
                      "needs_js": needs_js, "oracle_actions": actions,
                      "oracle_evidence": evidence},
        ))

    for person in rng.sample(list(w.people), 3):
        url = f"{base}/people/{person.slug}.html"
        add("profile", f"In which year did {person.name} join the {w.institute}?",
            str(person.joined), [
                (search_action(f"I need {person.name}'s staff profile.", f"{person.name} staff profile"),
                 url),
                (crawl_action("The profile page should say when they joined.", url, "year joined"),
                 f"in {person.joined}"),
                (answer_action(f"The profile says {person.name} joined in {person.joined}.",
                         str(person.joined)), ""),
            ])

    add("founder", *founder_question(w, base))

    for dept in rng.sample(list(w.departments), 2):
        head = w.person(dept.head)
        dept_url = f"{base}/departments/{dept.slug}.html"
        head_url = f"{base}/people/{head.slug}.html"
        add("head_joined",
            f"In which year did the head of the {dept.name} department of the {w.institute} "
            f"join the institute?", str(head.joined), [
                (search_action("First find who heads the department.",
                         f"{dept.name} department head staff projects"), dept_url),
                (crawl_action("The department page names its head.", dept_url, "head of department"),
                 head.name),
                (crawl_action(f"{head.name} heads it; follow the link to the profile.", head_url,
                        "year joined"), f"in {head.joined}"),
                (answer_action(f"{head.name} joined in {head.joined}.", str(head.joined)), ""),
            ])

    for dept in rng.sample(list(w.departments), 2):
        project = w.project(dept.projects[0])
        dept_url = f"{base}/departments/{dept.slug}.html"
        project_url = f"{base}/projects/{project.slug}.html"
        add("project_budget",
            f"What was the approved budget, in euros, of {project.name} of the {w.institute}? "
            f"Answer with a number.", str(project.budget_eur), [
                (search_action(f"{project.name} belongs to the {dept.name} department; find its page.",
                         f"{dept.name} department head staff projects"), dept_url),
                (crawl_action("The department page links to its projects.", dept_url, project.name),
                 f"/projects/{project.slug}.html"),
                (crawl_action("Follow the link to the project page.", project_url, "approved budget"),
                 f"{project.budget_eur:,} euros"),
                (answer_action(f"The budget is {project.budget_eur:,} euros.", str(project.budget_eur)),
                 ""),
            ])

    _add_awkward_tasks(w, base, rng, add, include_js=include_js)
    return tasks


def _add_awkward_tasks(w: World, base: str, rng: random.Random, add: Callable[..., None], *,
                       include_js: bool) -> None:
    """The tasks whose evidence sits behind the awkward pages: a PDF, a redirect chain, a slow
    page and (``include_js``) a JavaScript-rendered one."""
    reports_url = f"{base}/reports/index.html"
    for report in rng.sample(list(w.reports), 2):
        pdf_url = f"{base}/files/annual-report-{report.year}.pdf"
        add("report_pdf",
            f"According to its {report.year} annual report, how many visitors did the "
            f"{w.institute} welcome in {report.year}? Answer with a number.",
            str(report.visitors), [
                (search_action("The annual reports page should link the report.",
                         f"annual reports {w.short_name}"), reports_url),
                (crawl_action("Open the reports page to find the PDF link.", reports_url,
                        f"{report.year} report"), f"annual-report-{report.year}.pdf"),
                (crawl_action("Read the PDF report.", pdf_url, "visitors"), f"{report.visitors:,} visitors"),
                (answer_action(f"The report says {report.visitors:,} visitors.", str(report.visitors)), ""),
            ])

    for symposium in w.symposia:
        add("symposium_city", *symposium_question(w, base, symposium))

    ledger_url = f"{base}{SLOW_PAGE_PATH}"
    add("slow_ledger", f"How many items does the equipment ledger of the {w.institute} list?",
        str(w.ledger_entries), [
            (search_action("Find the equipment ledger.", f"equipment ledger {w.short_name}"), ledger_url),
            (crawl_action("Read the ledger page (it is slow).", ledger_url, "number of items"),
             f"{w.ledger_entries} items"),
            (answer_action(f"The ledger lists {w.ledger_entries} items.", str(w.ledger_entries)), ""),
        ])

    if include_js:
        buoy_url = f"{base}{JS_PAGE_PATH}"
        height = str(w.buoy_wave_height_m)
        add("js_buoy",
            f"What maximum wave height, in metres, does the live buoy dashboard of the "
            f"{w.institute} report? Answer with a number.", height, [
                (search_action("Find the live buoy dashboard.", f"live buoy dashboard {w.short_name}"),
                 buoy_url),
                (crawl_action("The dashboard renders its reading with JavaScript.", buoy_url,
                        "wave height"), f"{height} metres"),
                (answer_action(f"The dashboard reports {height} metres.", height), ""),
            ], needs_js=True)
