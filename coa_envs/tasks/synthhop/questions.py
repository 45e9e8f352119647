"""Multi-hop questions over a SynthHop world, with the oracle's hop-by-hop solution.

A question is a chain of relations from a named start entity: each inner hop becomes a
noun phrase ("the founder of the company that built the Brolan Lens") and the last hop the
question ("In which city was ... born?"). Answering needs one search per hop, because each
fact is written only on its subject's page. The oracle actions search for the subject's
name plus a relation keyword, hop by hop, then answer; tests check that every one of those
searches really retrieves the page it needs with the bm25 tool.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import dataclass

from coa_envs.tasks.synthhop.world import RELATIONS, Entity, Relation, World

__all__ = ["DIFFICULTY_HOPS", "Question", "generate_questions", "parse_hops"]

log = logging.getLogger(__name__)

# Named difficulty settings -> allowed hop counts ("easy" is the 1-hop setting for CPU RL).
DIFFICULTY_HOPS = {"easy": (1,), "medium": (2,), "hard": (3, 4), "mixed": (1, 2, 3, 4)}
_YEAR_ANSWER_SHARE = 0.15  # most answers are short entity names; a few are years


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    answer: str
    hops: int
    relations: tuple[str, ...]
    support: tuple[str, ...]  # entity keys whose pages hold each hop's fact, in order
    support_titles: tuple[str, ...]
    oracle_actions: tuple[str, ...]


def parse_hops(hops: int | list[int] | tuple[int, ...] | None, difficulty: str | None) -> tuple[int, ...]:
    """Allowed hop counts from ``hops`` (int or list) or a named ``difficulty``."""
    if hops is not None and difficulty is not None:
        raise ValueError("synthhop: give either hops or difficulty, not both")
    if hops is None:
        name = difficulty or "mixed"
        if name not in DIFFICULTY_HOPS:
            raise ValueError(f"synthhop: difficulty must be one of {sorted(DIFFICULTY_HOPS)}, not {name!r}")
        return DIFFICULTY_HOPS[name]
    allowed = (hops,) if isinstance(hops, int) else tuple(int(h) for h in hops)
    if not allowed or any(h < 1 or h > 4 for h in allowed):
        raise ValueError(f"synthhop: hops must be between 1 and 4, got {hops!r}")
    return allowed


def _by_subject() -> dict[str, list[Relation]]:
    table: dict[str, list[Relation]] = {}
    for relation in RELATIONS:
        table.setdefault(relation.subject, []).append(relation)
    return table


def _walk(world: World, rng: random.Random, hops: int, want_year: bool) -> list[tuple[Entity, Relation]] | None:
    """A random chain of ``hops`` relations that never revisits an entity; None if stuck."""
    table = _by_subject()
    start = rng.choice(list(world.entities.values()))
    chain: list[tuple[Entity, Relation]] = []
    seen = {start.key}
    current = start
    for step in range(hops):
        last = step == hops - 1
        options = [r for r in table.get(current.kind, ()) if (r.target == "year") == (last and want_year)]
        rng.shuffle(options)
        for relation in options:
            target = world.target(current, relation)
            if isinstance(target, int) or target.key not in seen:
                break
        else:
            return None
        chain.append((current, relation))
        if isinstance(target, int):
            break
        seen.add(target.key)
        current = target
    return chain if len(chain) == hops else None


def _leaks(answer: str, question: str) -> bool:
    return re.search(rf"\b{re.escape(answer.lower())}\b", question.lower()) is not None


def _oracle(world: World, chain: list[tuple[Entity, Relation]], answer: str) -> tuple[str, ...]:
    actions = []
    for hop, (subject, relation) in enumerate(chain, start=1):
        if hop == 1:
            thought = (
                f"The question starts from {subject.mention}. I will look up its page to find "
                f"the {relation.name.replace('_', ' ')}."
            )
        else:
            thought = (
                f"The previous passage says this is {subject.name}. Next I need the "
                f"{relation.name.replace('_', ' ')} of {subject.name}."
            )
        actions.append(f"<think>{thought}</think>\n<wiki_search>{subject.name} {relation.query_word}</wiki_search>")
    last_subject, last_relation = chain[-1]
    actions.append(
        f"<think>The passage about {last_subject.name} gives the {last_relation.name.replace('_', ' ')}: "
        f"{answer}.</think>\n<answer>{answer}</answer>"
    )
    return tuple(actions)


def _question_text(chain: list[tuple[Entity, Relation]]) -> str:
    phrase = chain[0][0].mention
    for _, relation in chain[:-1]:
        phrase = relation.phrase.format(x=phrase)
    text = chain[-1][1].question.format(x=phrase)
    return text[0].upper() + text[1:]


def generate_questions(world: World, count: int, allowed_hops: tuple[int, ...], seed: int = 0) -> list[Question]:
    """``count`` distinct, leak-free questions with hop counts drawn evenly from ``allowed_hops``."""
    rng = random.Random(f"synthhop-questions-{world.seed}-{seed}-{allowed_hops}")
    questions: list[Question] = []
    seen_texts: set[str] = set()
    attempts = 0
    while len(questions) < count:
        attempts += 1
        if attempts > 50 * count + 2000:
            # A small world has only so many distinct 1-hop questions; return what exists.
            log.warning(
                "synthhop: only %d distinct questions with hops %s (asked for %d)", len(questions), allowed_hops, count
            )
            break
        hops = allowed_hops[len(questions) % len(allowed_hops)]
        chain = _walk(world, rng, hops, want_year=rng.random() < _YEAR_ANSWER_SHARE)
        if chain is None:
            continue
        text = _question_text(chain)
        final = world.target(*chain[-1])
        answer = str(final) if isinstance(final, int) else final.name
        if text in seen_texts or _leaks(answer, text):
            continue
        seen_texts.add(text)
        questions.append(
            Question(
                text=text,
                answer=answer,
                hops=hops,
                relations=tuple(r.name for _, r in chain),
                support=tuple(s.key for s, _ in chain),
                support_titles=tuple(s.name for s, _ in chain),
                oracle_actions=_oracle(world, chain, answer),
            )
        )
    return questions
