"""A seeded fictional world: entities, functional relations and Wikipedia-like pages.

Every name is built from syllables and every name's distinctive word is used once in the
whole world, so an entity's full name retrieves its own page and an answer can never be a
part of another entity's name (no leaks through naming). Relations are functions (a
product has one maker, a company one founder...), so every chained question has exactly
one answer. Generation uses only a private ``random.Random(seed)``: the same seed gives the
same world on every machine and Python version >= 3.11.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from coa_envs.retrieval.corpus import Passage

__all__ = ["KIND_COUNTS", "RELATIONS", "Entity", "Relation", "World", "generate_world"]

# How many entities of each kind a world has (about 270 pages: small enough to index in
# well under a second, big enough that one keyword search does not find everything).
KIND_COUNTS = {"country": 8, "city": 40, "person": 120, "company": 30, "university": 10, "product": 60}


@dataclass(frozen=True, slots=True)
class Relation:
    """A function from one entity kind to another kind (or to a year when ``target`` is "year").

    ``phrase`` turns the subject's noun phrase into the object's noun phrase (used for the
    inner hops of a question), ``question`` asks for the object directly (the last hop),
    ``query_word`` is the keyword the oracle adds to the subject's name when searching.
    """

    name: str
    subject: str
    target: str
    phrase: str
    question: str
    query_word: str


RELATIONS: tuple[Relation, ...] = (
    Relation("maker", "product", "company", "the company that built {x}", "Which company built {x}?", "built"),
    Relation("designer", "product", "person", "the designer of {x}", "Who designed {x}?", "designer"),
    Relation("completed", "product", "year", "", "In what year was {x} completed?", "completed"),
    Relation("founder", "company", "person", "the founder of {x}", "Who founded {x}?", "founder"),
    Relation(
        "headquarters",
        "company",
        "city",
        "the city where {x} is headquartered",
        "In which city is {x} headquartered?",
        "headquarters",
    ),
    Relation("company_founded", "company", "year", "", "In what year was {x} founded?", "founded"),
    Relation("univ_founder", "university", "person", "the founder of {x}", "Who founded {x}?", "founder"),
    Relation(
        "location", "university", "city", "the city where {x} is located", "In which city is {x} located?", "located"
    ),
    Relation("birthplace", "person", "city", "the birthplace of {x}", "In which city was {x} born?", "born"),
    Relation(
        "alma_mater",
        "person",
        "university",
        "the university that {x} attended",
        "Which university did {x} attend?",
        "studied",
    ),
    Relation("employer", "person", "company", "the employer of {x}", "Which company employed {x}?", "worked"),
    Relation("birth_year", "person", "year", "", "In what year was {x} born?", "born"),
    Relation("country", "city", "country", "the country where {x} lies", "In which country is {x}?", "country"),
    Relation("capital", "country", "city", "the capital of {x}", "What is the capital of {x}?", "capital"),
)

_ONSETS = (
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "w",
    "z",
    "sh",
    "ch",
)
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "ia", "y")
_CODAS = ("", "", "n", "r", "l", "s", "th", "m", "x", "nd", "rk", "v")
_GIVEN = (
    "Aldric",
    "Brenna",
    "Corin",
    "Dalia",
    "Edwyn",
    "Fenna",
    "Garrick",
    "Hesper",
    "Ilsa",
    "Joran",
    "Kesia",
    "Lorcan",
    "Maelis",
    "Nerys",
    "Osric",
    "Perrin",
    "Quilla",
    "Roderick",
    "Saoirse",
    "Tamsin",
    "Ulric",
    "Veda",
    "Wystan",
    "Yselde",
)
_OCCUPATIONS = (
    "engineer",
    "chemist",
    "architect",
    "inventor",
    "physicist",
    "industrialist",
    "cartographer",
    "shipwright",
    "astronomer",
    "metallurgist",
)
_INDUSTRIES = {
    "Works": "engineering",
    "Foundry": "metalworking",
    "Shipyards": "shipbuilding",
    "Instruments": "precision instruments",
    "Motors": "motor vehicle",
    "Optics": "optical",
    "Aeronautics": "aircraft",
    "Printworks": "printing",
}
_PRODUCT_KINDS = (
    "locomotive",
    "lighthouse lens",
    "airship",
    "telescope",
    "steam launch",
    "printing press",
    "bridge crane",
    "chronometer",
    "diving bell",
    "monoplane",
)
_COUNTRY_SUFFIX = ("ia", "land", "mark", "ora")
_UNIVERSITY_FORMS = ("{w} University", "{w} College", "{w} Institute of Technology")
_CITY_FEATURES = (
    "its old harbour",
    "a covered market",
    "a stone bridge over the river",
    "its clock tower",
    "a botanical garden",
    "its textile mills",
    "a hilltop fortress",
)


@dataclass(slots=True)
class Entity:
    """One thing in the world; ``facts`` maps relation name -> target entity key or a year."""

    key: str
    kind: str
    name: str
    facts: dict[str, str | int] = field(default_factory=dict)

    @property
    def mention(self) -> str:
        """How the entity is written inside a sentence ("the X locomotive" for products)."""
        return f"the {self.name}" if self.kind == "product" else self.name


@dataclass(slots=True)
class World:
    seed: int
    entities: dict[str, Entity]
    extras: dict[str, dict[str, object]]

    def of_kind(self, kind: str) -> list[Entity]:
        return [e for e in self.entities.values() if e.kind == kind]

    def target(self, entity: Entity, relation: Relation) -> Entity | int:
        value = entity.facts[relation.name]
        return value if isinstance(value, int) else self.entities[value]

    def passages(self) -> list[Passage]:
        return [Passage(e.key, e.name, _render(self, e)) for e in self.entities.values()]


class _Names:
    """Unique pronounceable words; a word is never reused in the same world."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = {g.lower() for g in _GIVEN}

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        while True:
            count = self.rng.randint(*syllables)
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(count)]
            word = ("".join(parts) + self.rng.choice(_CODAS)).capitalize()
            if 5 <= len(word) <= 11 and word.lower() not in self.used:
                self.used.add(word.lower())
                return word


def generate_world(seed: int = 0) -> World:
    """Build the world for ``seed``: entities first, then functional relations between them."""
    rng = random.Random(f"synthhop-world-{seed}")
    names = _Names(rng)
    entities: dict[str, Entity] = {}
    extras: dict[str, dict[str, object]] = {}

    def add(kind: str, name: str) -> Entity:
        entity = Entity(f"{kind}-{sum(e.kind == kind for e in entities.values()):03d}", kind, name)
        entities[entity.key] = entity
        return entity

    countries = [add("country", names.word() + rng.choice(_COUNTRY_SUFFIX)) for _ in range(KIND_COUNTS["country"])]
    cities = [add("city", names.word()) for _ in range(KIND_COUNTS["city"])]
    for i, city in enumerate(cities):
        country = countries[i % len(countries)] if i < len(countries) else rng.choice(countries)
        city.facts["country"] = country.key
        if i < len(countries):
            country.facts["capital"] = city.key
        extras[city.key] = {"founded": rng.randint(900, 1700), "feature": rng.choice(_CITY_FEATURES)}
    people = [add("person", f"{rng.choice(_GIVEN)} {names.word()}") for _ in range(KIND_COUNTS["person"])]
    universities = [
        add("university", rng.choice(_UNIVERSITY_FORMS).format(w=names.word()))
        for _ in range(KIND_COUNTS["university"])
    ]
    companies = []
    for _ in range(KIND_COUNTS["company"]):
        suffix = rng.choice(sorted(_INDUSTRIES))
        companies.append(add("company", f"{names.word()} {suffix}"))
        extras[companies[-1].key] = {"industry": _INDUSTRIES[suffix]}
    products = []
    for _ in range(KIND_COUNTS["product"]):
        kind = rng.choice(_PRODUCT_KINDS)
        products.append(add("product", f"{names.word()} {kind.title()}"))
        extras[products[-1].key] = {"kind": kind}

    for person in people:
        person.facts["birthplace"] = rng.choice(cities).key
        person.facts["birth_year"] = rng.randint(1790, 1880)
        person.facts["alma_mater"] = rng.choice(universities).key
        person.facts["employer"] = rng.choice(companies).key
        extras[person.key] = {"occupation": rng.choice(_OCCUPATIONS)}
    # Each founder founds exactly one organisation, so "X founded Y" on a person's page is unique.
    founders = rng.sample(people, len(companies) + len(universities))
    for org, founder in zip([*companies, *universities], founders, strict=True):
        org.facts["univ_founder" if org.kind == "university" else "founder"] = founder.key
        year = int(founder.facts["birth_year"]) + rng.randint(24, 45)
        if org.kind == "company":
            org.facts["headquarters"] = rng.choice(cities).key
            org.facts["company_founded"] = year
        else:
            org.facts["location"] = rng.choice(cities).key
            extras[org.key] = {"founded": year}
        extras.setdefault(founder.key, {})["founded_org"] = org.key
    for product in products:
        maker = rng.choice(companies)
        product.facts["maker"] = maker.key
        product.facts["designer"] = rng.choice(people).key
        product.facts["completed"] = int(maker.facts["company_founded"]) + rng.randint(3, 40)
    return World(seed=seed, entities=entities, extras=extras)


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _surname(person: Entity) -> str:
    return person.name.split()[-1]


def _render(world: World, entity: Entity) -> str:
    """The page text. Each fact a relation needs is stated once, plainly, on the subject's page."""
    e, get, extra = world.entities, entity.facts.get, world.extras.get(entity.key, {})
    if entity.kind == "country":
        capital = e[str(get("capital"))]
        others = [c.name for c in world.of_kind("city") if c.facts["country"] == entity.key and c is not capital]
        listing = f" Other cities of {entity.name} include {', '.join(others[:4])}." if others else ""
        return f"{entity.name} is a country. Its capital is {capital.name}.{listing}"
    if entity.kind == "city":
        country = e[str(get("country"))]
        capital = " and the capital of that country" if country.facts.get("capital") == entity.key else ""
        return (
            f"{entity.name} is a city in the country of {country.name}{capital}. The town was founded "
            f"around the year {extra['founded']} and is known for {extra['feature']}."
        )
    if entity.kind == "person":
        surname = _surname(entity)
        text = (
            f"{entity.name} (born {get('birth_year')}) was {_a(extra['occupation'])}. {entity.name} was born "
            f"in {e[str(get('birthplace'))].name}. {surname} studied at {e[str(get('alma_mater'))].name} "
            f"and later worked for {e[str(get('employer'))].name}."
        )
        if "founded_org" in extra:
            text += f" {surname} is remembered as the founder of {e[str(extra['founded_org'])].name}."
        return text
    if entity.kind == "company":
        made = [p.mention for p in world.of_kind("product") if p.facts["maker"] == entity.key]
        text = (
            f"{entity.name} is {_a(extra['industry'])} company with its headquarters in "
            f"{e[str(get('headquarters'))].name}. It was founded in {get('company_founded')}; its founder "
            f"was {e[str(get('founder'))].name}."
        )
        if made:
            text += f" {entity.name} built {_join(made[:3])}."
        return text
    if entity.kind == "university":
        return (
            f"{entity.name} is a university located in {e[str(get('location'))].name}. It was founded in "
            f"{extra['founded']}; its founder was {e[str(get('univ_founder'))].name}."
        )
    designer = e[str(get("designer"))]
    return (
        f"The {entity.name} is {_a(extra['kind'])} built by {e[str(get('maker'))].name} and completed "
        f"in {get('completed')}. Its designer was {designer.name}."
    )
