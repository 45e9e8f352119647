"""A seeded fictional organisation: the facts that the mini-web's pages state.

The world is a small research institute (departments, people, projects, events, yearly
reports) drawn from word pools with ``random.Random(seed)``, so the same seed always gives
the same facts and different seeds give different answers (no memorised shortcut). Names
are combinations that do not describe real people or places. This module only produces
facts; :mod:`coa_envs.miniweb.site` renders them as pages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["SIZES", "Department", "Person", "Project", "Symposium", "World", "YearReport", "make_world"]

_FIRST = ("Alvar", "Brenna", "Caius", "Delphine", "Emrys", "Fenna", "Goran", "Hedda", "Ilario",
          "Jorunn", "Kasimir", "Liesel", "Mattis", "Noor", "Osric", "Perpetua", "Quillon", "Rosalind",
          "Sigrun", "Tobiah", "Ulla", "Vesper", "Wendeline", "Xaver", "Ysolde", "Zoltan")
_LAST = ("Abernethy", "Brightwater", "Castellane", "Dunmore", "Eskildsen", "Fairweather",
         "Grimsdottir", "Holloway", "Ingersoll", "Jaramillo", "Kettleby", "Lindqvist", "Marchetti",
         "Nettleford", "Oyelaran", "Pemberton", "Quennell", "Rasmussen", "Saltmarsh", "Thorsby",
         "Underhill", "Valtonen", "Whitlock", "Yarrowby", "Zabrowski")
_PLACES = ("Varnholm", "Kestermouth", "Lindisfell", "Oakhaven Quay", "Brackenridge", "Storrvik",
           "Eldermere", "Marrowgate", "Pellinor", "Quarrystone", "Rookhallow", "Saltcombe Ness")
_INSTITUTE_WORDS = (("Halvorsen", "Tidal Research"), ("Merriweather", "Coastal Science"),
                    ("Ostrander", "Polar Studies"), ("Belcourt", "Atmospheric Physics"),
                    ("Tamsworth", "Marine Acoustics"))
_DEPARTMENTS = ("Ocean Acoustics", "Coastal Ecology", "Instrument Workshop", "Data Archive",
                "Tidal Modelling", "Public Outreach", "Sediment Chemistry", "Ice Dynamics")
_PROJECTS = ("Kestrel", "Lantern", "Driftwood", "Halcyon", "Meridian", "Saltglass", "Undertow",
             "Bellwether", "Cormorant", "Foxglove", "Quicksilver", "Tern")
# Only a large world draws from these (appended after the pools above, so a small world's
# draws, and so coa/MiniWeb-v0's facts, stay what they were).
_MORE_DEPARTMENTS = ("Wave Energy", "Benthic Biology", "Remote Sensing", "Harbour Engineering")
_MORE_PROJECTS = ("Albatross", "Brinewater", "Coracle", "Dunlin", "Ebbtide", "Fathom", "Gannet",
                  "Hawser", "Isobar", "Jetsam", "Kittiwake", "Limpet", "Mooring", "Narwhal",
                  "Osprey", "Petrel")
_ROLES = ("research scientist", "senior engineer", "data curator", "field technician",
          "postdoctoral fellow", "laboratory manager")
_PARTNERS = ("the Northmoor Maritime Trust", "the Ravelstone Geological Society",
             "the Port of Kestermouth Authority", "the Eldermere Science Fund",
             "the Brackenridge Coastal Council", "the Aldwyn Foundation")
_VENUES = ("the Old Customs House", "the Lighthouse Pavilion", "the Granary Hall",
           "the Weavers' Assembly Rooms")


@dataclass(frozen=True, slots=True)
class Person:
    slug: str
    name: str
    role: str
    department: str
    joined: int
    hometown: str
    office: int


@dataclass(frozen=True, slots=True)
class Project:
    slug: str
    name: str
    department: str
    lead: str
    budget_eur: int
    started: int
    partner: str


@dataclass(frozen=True, slots=True)
class Department:
    slug: str
    name: str
    head: str  # person slug
    founded: int
    projects: tuple[str, ...]  # project slugs


@dataclass(frozen=True, slots=True)
class YearReport:
    year: int
    visitors: int
    publications: int
    vessel_days: int


@dataclass(frozen=True, slots=True)
class Symposium:
    year: int
    city: str
    venue: str
    keynote: str  # person slug


@dataclass(frozen=True, slots=True)
class World:
    seed: int
    institute: str
    short_name: str
    city: str
    founded: int
    founder: str
    departments: tuple[Department, ...]
    people: tuple[Person, ...]
    projects: tuple[Project, ...]
    reports: tuple[YearReport, ...]
    symposia: tuple[Symposium, ...]
    buoy_wave_height_m: float  # shown only by the JavaScript-rendered dashboard
    ledger_entries: int  # stated on the slow page

    def person(self, slug: str) -> Person:
        return next(p for p in self.people if p.slug == slug)

    def project(self, slug: str) -> Project:
        return next(p for p in self.projects if p.slug == slug)

    def department(self, slug: str) -> Department:
        return next(d for d in self.departments if d.slug == slug)


def _slug(text: str) -> str:
    return "-".join("".join(ch if ch.isalnum() else " " for ch in text.lower()).split())


SIZES: dict[str, tuple[int, int]] = {"small": (4, 3), "large": (12, 8)}
"""World sizes by name: (departments, staff per department). ``small`` is coa/MiniWeb-v0's
world (13 questions); ``large`` has 96 people and 24 projects, enough for the hundreds of
questions of coa/MiniWebLarge-v0 (:mod:`coa_envs.miniweb.pool`)."""


def make_world(seed: int = 0, *, size: str = "small") -> World:
    """Draw a world of ``size`` (:data:`SIZES`); every name is unique inside it so questions
    have one answer."""
    if size not in SIZES:
        raise ValueError(f"world size {size!r} is not valid; allowed: {sorted(SIZES)}")
    n_departments, staff_per_department = SIZES[size]
    departments_pool, projects_pool = _DEPARTMENTS, _PROJECTS
    if size != "small":
        departments_pool, projects_pool = _DEPARTMENTS + _MORE_DEPARTMENTS, _PROJECTS + _MORE_PROJECTS
    rng = random.Random(seed)
    family, field = rng.choice(_INSTITUTE_WORDS)
    institute = f"{family} Institute for {field}"
    city = rng.choice(_PLACES)
    founded = rng.randint(1921, 1968)
    names = rng.sample([f"{f} {last}" for f in _FIRST for last in _LAST],
                       n_departments * staff_per_department + 1)
    founder = names.pop()
    dept_names = rng.sample(departments_pool, n_departments)
    project_names = rng.sample(projects_pool, n_departments * 2)
    people: list[Person] = []
    projects: list[Project] = []
    departments: list[Department] = []
    offices = rng.sample(range(101, 499), len(names))
    for d_index, dept in enumerate(dept_names):
        staff = names[d_index * staff_per_department:(d_index + 1) * staff_per_department]
        for s_index, name in enumerate(staff):
            role = "head of department" if s_index == 0 else rng.choice(_ROLES)
            people.append(Person(_slug(name), name, role, dept, rng.randint(1988, 2021),
                                 rng.choice([p for p in _PLACES if p != city]),
                                 offices[d_index * staff_per_department + s_index]))
        dept_projects = []
        for p_index in range(2):
            pname = f"Project {project_names[d_index * 2 + p_index]}"
            lead = _slug(staff[(p_index + 1) % len(staff)])
            budget = rng.randint(12, 980) * 1000 + rng.choice((0, 500))
            projects.append(Project(_slug(pname), pname, dept, lead, budget,
                                    rng.randint(2009, 2023), rng.choice(_PARTNERS)))
            dept_projects.append(_slug(pname))
        departments.append(Department(_slug(dept), dept, _slug(staff[0]),
                                       rng.randint(founded, 2005), tuple(dept_projects)))
    reports = tuple(
        YearReport(year, rng.randint(2000, 48000), rng.randint(14, 160), rng.randint(20, 240))
        for year in (2021, 2022, 2023)
    )
    symposia = tuple(
        Symposium(year, rng.choice([p for p in _PLACES if p != city]), rng.choice(_VENUES),
                  rng.choice(people).slug)
        for year in (2023, 2024)
    )
    return World(
        seed=seed,
        institute=institute,
        short_name=f"{family} Institute",
        city=city,
        founded=founded,
        founder=founder,
        departments=tuple(departments),
        people=tuple(people),
        projects=tuple(projects),
        reports=reports,
        symposia=symposia,
        buoy_wave_height_m=round(rng.uniform(1.5, 9.5), 1),
        ledger_entries=rng.randint(300, 9000),
    )
