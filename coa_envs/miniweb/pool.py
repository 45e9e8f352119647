"""The question pool of a large mini-web world (``coa/MiniWebLarge-v0``): every fact a page states.

``coa/MiniWeb-v0`` asks 13 questions about a small world: enough to check an agent, too few
to train one. A ``large`` world (:data:`coa_envs.miniweb.world.SIZES`: 96 people, 12
departments, 24 projects) asks about each person, department, project, annual report and
symposium: 372 questions of 12 kinds. As in ``coa/MiniWeb-v0``, no answer is in a search snippet: each
needs a search, one or two crawls (the people and department pages are indexed; project
pages, PDFs and symposium pages are reached by following links) and reading the page.

The train/test split is by *subject*, not by question: every question about one person (one
department, project, year) falls on the same side of the fixed hashed 80/20 partition
(:func:`coa_envs.tasks.split.is_heldout` of ``"miniweb-large:" + subject``), so a held-out
question is about an entity whose pages no training question read. "When did the head of X
join?" has the head as its subject, so it sits beside "When did <head> join?". Facts that
a snippet gives away (a person's role, hence who heads a department) are never asked.
"""

from __future__ import annotations

from collections.abc import Callable

from coa_envs.miniweb.tasks import (
    answer_action,
    crawl_action,
    founder_question,
    search_action,
    symposium_question,
)
from coa_envs.miniweb.world import Department, Person, Project, World
from coa_envs.tasks.split import is_heldout
from coa_envs.types import Task

__all__ = ["POOL_KINDS", "build_pool_tasks", "spread_kinds", "subject_heldout"]

POOL_KINDS = ("joined", "hometown", "office", "dept_established", "head_joined",
              "project_budget", "project_started", "report_visitors",
              "report_publications", "report_vessel_days", "symposium_city", "founder")

_Step = tuple[str, str]  # (action, a string its observation must contain)


def subject_heldout(subject: str) -> bool:
    """Whether questions about ``subject`` are held out (the test side of the split)."""
    return is_heldout(f"miniweb-large:{subject}")


def build_pool_tasks(world: World, base_url: str) -> list[Task]:
    """Every question of the pool for ``world`` served at ``base_url`` (both splits)."""
    w, base = world, base_url.rstrip("/")
    tasks: list[Task] = []

    def add(kind: str, subject: str, question: str, answer: str, steps: list[_Step]) -> None:
        tasks.append(Task(
            task_id=f"miniweb-s{w.seed}-large-{kind}-{subject}",
            question=question,
            gold=(answer,),
            metadata={"dataset": "miniweb", "kind": kind, "seed": w.seed, "base_url": base,
                      "world": "large", "subject": subject, "needs_js": False,
                      "oracle_actions": [action for action, _ in steps],
                      "oracle_evidence": [expected for _, expected in steps]},
        ))

    for person in w.people:
        _person_questions(w, base, person, add)
    for dept in w.departments:
        _department_questions(w, base, dept, add)
        for slug in dept.projects:
            _project_questions(w, base, dept, w.project(slug), add)
    _report_and_event_questions(w, base, add)
    return tasks


def spread_kinds(tasks: list[Task]) -> list[Task]:
    """The same tasks, kinds spread evenly: item i of a kind with n items sits at (i + 0.5)/n
    of the list, so any first N tasks (``coa eval --n``) ask each kind in its share of the
    whole list, not N questions about the first people."""
    by_kind: dict[str, list[Task]] = {}
    for task in tasks:
        by_kind.setdefault(task.metadata["kind"], []).append(task)
    keyed = [((index + 0.5) / len(items), POOL_KINDS.index(kind), task)
             for kind, items in by_kind.items() for index, task in enumerate(items)]
    return [task for *_, task in sorted(keyed, key=lambda item: item[:2])]


def _profile_steps(w: World, base: str, person: Person, goal: str) -> list[_Step]:
    url = f"{base}/people/{person.slug}.html"
    return [(search_action(f"I need {person.name}'s staff profile.", f"{person.name} staff profile"),
             url),
            (crawl_action(f"The profile page should give the {goal}.", url, goal), person.name)]


def _person_questions(w: World, base: str, person: Person, add: Callable[..., None]) -> None:
    first = person.name.split()[0]
    facts = (
        ("joined", f"In which year did {person.name} join the {w.institute}?", str(person.joined),
         "year joined", f"The profile says {first} joined in {person.joined}."),
        ("hometown", f"From which town did {person.name} come to the {w.institute}?",
         person.hometown, "previous town", f"The profile says {first} came from {person.hometown}."),
        ("office", f"In which room is the office of {person.name} of the {w.institute}? Answer "
                   f"with the room number.", str(person.office), "office room",
         f"The profile gives room {person.office}."),
    )
    for kind, question, answer, goal, reason in facts:
        steps = _profile_steps(w, base, person, goal)
        steps[-1] = (steps[-1][0], answer)
        add(kind, person.slug, question, answer, [*steps, (answer_action(reason, answer), "")])


def _department_steps(w: World, base: str, dept: Department, goal: str, expected: str) -> list[_Step]:
    url = f"{base}/departments/{dept.slug}.html"
    return [(search_action(f"The {dept.name} department's page should say it.",
                           f"{dept.name} department head staff projects"), url),
            (crawl_action("Read the department page.", url, goal), expected)]


def _department_questions(w: World, base: str, dept: Department, add: Callable[..., None]) -> None:
    head = w.person(dept.head)
    add("dept_established", dept.slug,
        f"In which year was the {dept.name} department of the {w.institute} established?",
        str(dept.founded), [*_department_steps(w, base, dept, "year established", f"in {dept.founded}"),
                            (answer_action(f"The page says it was established in {dept.founded}.",
                                           str(dept.founded)), "")])
    head_url = f"{base}/people/{head.slug}.html"
    add("head_joined", head.slug,
        f"In which year did the head of the {dept.name} department of the {w.institute} join the "
        f"institute?", str(head.joined), [
            *_department_steps(w, base, dept, "head of department", head.name),
            (crawl_action(f"{head.name} heads it; follow the link to the profile.", head_url,
                          "year joined"), f"in {head.joined}"),
            (answer_action(f"{head.name} joined in {head.joined}.", str(head.joined)), "")])


def _project_questions(w: World, base: str, dept: Department, project: Project,
                       add: Callable[..., None]) -> None:
    project_url = f"{base}/projects/{project.slug}.html"
    for kind, question, answer, goal, evidence in (
        ("project_budget", f"What was the approved budget, in euros, of {project.name} of the "
                           f"{w.institute}? Answer with a number.", str(project.budget_eur),
         "approved budget", f"{project.budget_eur:,} euros"),
        ("project_started", f"In which year did {project.name} of the {w.institute} start?",
         str(project.started), "start year", f"started in {project.started}"),
    ):
        add(kind, project.slug, question, answer, [
            (search_action(f"{project.name} belongs to the {dept.name} department; find its page.",
                           f"{dept.name} department head staff projects"),
             f"{base}/departments/{dept.slug}.html"),
            (crawl_action("The department page links to its projects.",
                          f"{base}/departments/{dept.slug}.html", project.name),
             f"/projects/{project.slug}.html"),
            (crawl_action("Follow the link to the project page.", project_url, goal), evidence),
            (answer_action(f"The project page says {evidence}.", answer), "")])


def _report_and_event_questions(w: World, base: str, add: Callable[..., None]) -> None:
    reports_url = f"{base}/reports/index.html"
    for report in w.reports:
        pdf_url = f"{base}/files/annual-report-{report.year}.pdf"
        for kind, question, answer, evidence in (
            ("report_visitors", f"According to its {report.year} annual report, how many visitors "
                                f"did the {w.institute} welcome in {report.year}? Answer with a number.",
             str(report.visitors), f"{report.visitors:,} visitors"),
            ("report_publications", f"According to its {report.year} annual report, how many "
                                    f"peer-reviewed papers did the staff of the {w.institute} "
                                    f"publish? Answer with a number.",
             str(report.publications), f"{report.publications} peer-reviewed"),
            ("report_vessel_days", f"According to its {report.year} annual report, how many days "
                                   f"did the research vessels of the {w.institute} spend at sea? "
                                   f"Answer with a number.",
             str(report.vessel_days), f"{report.vessel_days} days"),
        ):
            add(kind, f"report-{report.year}", question, answer, [
                (search_action("The annual reports page should link the report.",
                               f"annual reports {w.short_name}"), reports_url),
                (crawl_action("Open the reports page to find the PDF link.", reports_url,
                              f"{report.year} report"), f"annual-report-{report.year}.pdf"),
                (crawl_action("Read the PDF report.", pdf_url, kind.split("_", 1)[1]), evidence),
                (answer_action(f"The report says {evidence}.", answer), "")])
    for symposium in w.symposia:
        add("symposium_city", f"symposium-{symposium.year}", *symposium_question(w, base, symposium))
    add("founder", "founder", *founder_question(w, base))
