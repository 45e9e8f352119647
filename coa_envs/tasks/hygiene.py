"""Gold-answer hygiene at load: a gold that normalises to nothing is refused, and counted.

A scorer compares normalised answers. A gold alias that normalises to the empty string
(``")"``, ``"---"``, ``"A+"`` under SQuAD normalisation, which drops punctuation and articles)
equals every answer that also normalises to nothing, so "The." would score 1 on it. Such
aliases are dropped when tasks are loaded; a task left with no gold is dropped too. Both are
logged (a warning naming the source and a few task ids) and counted in :data:`REPORTS`, which
``coa audit-reward`` prints. Each family uses the normalisation its scorer uses: SQuAD's for
QA (:func:`squad`), GAIA's for web tasks (:func:`gaia`), the string form for math (:func:`bare`).
Code tasks have tests instead: one whose every case expects nothing (no output, or a call that
returns ``None``) is passed by a program that does nothing, and is refused the same way
(:func:`refuse_trivial_tests`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from coa_envs.types import Task

__all__ = ["REPORTS", "GoldHygiene", "bare", "gaia", "refuse_empty_golds", "refuse_trivial_tests", "squad"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GoldHygiene:
    """What one load refused: gold aliases dropped and the tasks left with none."""

    source: str
    normalisation: str
    tasks_loaded: int
    refused_aliases: int = 0
    dropped_tasks: tuple[str, ...] = field(default_factory=tuple)
    examples: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (task id, alias)


REPORTS: dict[str, GoldHygiene] = {}
"""The latest report per source that refused anything (reports with nothing refused are not kept)."""
_lock = threading.Lock()


def squad(text: str) -> str:
    from coa_envs.rewards.em_f1 import normalize_answer

    return normalize_answer(text)


def gaia(text: str) -> str:
    from coa_envs.rewards.gaia import normalize_answer_string

    return normalize_answer_string(text)


def bare(text: str) -> str:
    """Math: what is left without whitespace, ``$`` and an empty ``\\boxed{}``."""
    return "".join(text.split()).replace("$", "").replace("\\boxed{}", "")


def refuse_empty_golds(tasks: Sequence[Task], normalise: Callable[[str], str], source: str) -> list[Task]:
    """``tasks`` without the gold aliases ``normalise`` maps to "" (and without tasks left with
    no gold); tasks without golds at all (code tests) pass through untouched."""
    kept: list[Task] = []
    refused: list[tuple[str, str]] = []
    dropped: list[str] = []
    for task in tasks:
        if not task.gold:
            kept.append(task)
            continue
        good = tuple(g for g in task.gold if normalise(str(g)))
        if len(good) == len(task.gold):
            kept.append(task)
            continue
        refused.extend((task.task_id, str(g)) for g in task.gold if g not in good)
        if good:
            kept.append(replace(task, gold=good))
        else:
            dropped.append(task.task_id)
    if refused:
        report = GoldHygiene(source, getattr(normalise, "__name__", "custom"), len(tasks), len(refused),
                             tuple(dropped), tuple(refused[:5]))
        with _lock:
            REPORTS[source] = report
        log.warning("%s: refused %d gold alias(es) that normalise to nothing (%s normalisation), e.g. %s; "
                    "%d task(s) left without a gold answer were dropped%s", source, len(refused),
                    report.normalisation, list(refused[:3]), len(dropped), f": {dropped[:5]}" if dropped else "")
    return kept


def _expects_nothing(case: dict, kind: str) -> bool:
    output = str(case.get("output", "")).strip()
    return not output if kind == "stdin" else output in ("", "null")


def refuse_trivial_tests(tasks: Sequence[Task], source: str) -> list[Task]:
    """``tasks`` without the code tasks whose every test case expects nothing."""
    kept, dropped = [], []
    for task in tasks:
        tests = task.tests if isinstance(task.tests, dict) else {}
        cases = tests.get("cases") or []
        if cases and all(_expects_nothing(c, tests.get("kind", "stdin")) for c in cases):
            dropped.append(task.task_id)
        else:
            kept.append(task)
    if dropped:
        with _lock:
            REPORTS[source] = GoldHygiene(source, "empty expected output", len(tasks), 0, tuple(dropped))
        log.warning("%s: %d code task(s) whose every test expects no output were dropped (a program that "
                    "does nothing passes them): %s", source, len(dropped), dropped[:5])
    return kept
