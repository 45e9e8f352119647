"""SynthHop: an offline multi-hop QA world for ``coa/SynthHop-v0`` (family ``synthhop``).

A seeded generator makes a small fictional knowledge base (countries, cities, people,
companies, universities, products), renders it as ~270 Wikipedia-like passages, indexes
them with the same ``bm25`` backend the real wiki envs use (built once into a cache dir,
well under a second) and asks questions that need 1-4 retrieval hops. Nothing is
downloaded, everything is deterministic for a seed, and each task carries
``metadata["oracle_actions"]`` -- the searches and answer that solve it -- so the env can
be demonstrated, tested and trained on CPU. ``difficulty="easy"`` (1 hop) is the RL demo
setting.

Task options: ``seed`` (world), ``hops`` (int or list, 1-4) or ``difficulty``
(easy/medium/hard/mixed), ``num_tasks``, ``split`` (all/train/test: a fixed 80/20 split of
one question pool: every fifth generated question is held out; questions come in a fixed
order, so task ``i`` and its side do not depend on ``num_tasks``; the partition holds within
one ``seed`` and hop setting, so train and evaluate with the same ones), ``split_rule``
(:func:`held_out`: ``entity``, the default, keeps a question on the side of an earlier
question with the same start entity and answer, so a held-out answer was never trained on;
``index`` is every fifth question alone, ``coa/SynthHop-v0``'s rule, under which 2 of the 100
held-out questions of the default pool repeated a training question's entity and answer),
``cache_dir`` (where the index goes; default ``$COA_CACHE_DIR/synthhop`` or
``~/.cache/coa_envs/synthhop``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from coa_envs.tasks.hygiene import refuse_empty_golds, squad
from coa_envs.tasks.split import check_split
from coa_envs.tasks.synthhop.questions import DIFFICULTY_HOPS, Question, generate_questions, parse_hops
from coa_envs.tasks.synthhop.world import World, generate_world
from coa_envs.types import Task

__all__ = ["DIFFICULTY_HOPS", "SPLIT_NOTE", "SPLIT_RULES", "build_world_index", "generate_world", "held_out",
           "load_tasks"]

SPLIT_NOTE = "train/test 80/20"
"""What ``coa list`` says about this family's ``split`` option (:mod:`coa_envs.tasks.split`)."""


SPLIT_RULES = ("entity", "index")


def held_out(questions: list[Question], rule: str = "entity") -> list[bool]:
    """Which questions are held out (the test side). Every fifth question is; under ``entity``
    a question whose start entity and answer an earlier question already has takes that
    question's side instead, so no held-out answer about an entity is a training answer about
    it ("Where is Lorcan Waegor's employer?" -> Vitha held out while "Where was Lorcan Waegor
    born?" -> Vitha is trained on). The side of question ``i`` depends only on questions 0..i,
    so it does not change with ``num_tasks``."""
    if rule not in SPLIT_RULES:
        raise ValueError(f"synthhop: split_rule must be one of {list(SPLIT_RULES)}, not {rule!r}")
    sides: dict[tuple[str, str], bool] = {}
    flags = []
    for number, question in enumerate(questions):
        by_index = number % 5 == 4
        key = (question.support[0], squad(question.answer))
        flags.append(by_index if rule == "index" else sides.setdefault(key, by_index))
    return flags


def _cache_root(cache_dir: str | Path | None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    if os.environ.get("COA_CACHE_DIR"):
        return Path(os.environ["COA_CACHE_DIR"]) / "synthhop"
    home_cache = Path.home() / ".cache" / "coa_envs" / "synthhop"
    try:
        home_cache.mkdir(parents=True, exist_ok=True)
        return home_cache
    except OSError:  # read-only home (some CI sandboxes)
        return Path(tempfile.gettempdir()) / "coa_envs" / "synthhop"


def build_world_index(world: World, cache_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Write the world's corpus and bm25 index (once per content hash); return (index, corpus)."""
    from coa_envs.retrieval.bm25 import TOKEN_PATTERN, build_bm25_index

    rows = [json.dumps(p.to_row(), ensure_ascii=False) + "\n" for p in world.passages()]
    payload = "".join(rows).encode("utf-8")
    # The tokenizer is part of the key: an index built by another version is never reused.
    digest = hashlib.sha256(payload + TOKEN_PATTERN.encode()).hexdigest()[:16]
    root = _cache_root(cache_dir) / f"world{world.seed}-{digest}"
    corpus, index = root / "corpus.jsonl", root / "bm25"
    if (index / "coa_index.json").is_file() and corpus.is_file():
        return index, corpus
    root.mkdir(parents=True, exist_ok=True)
    if not corpus.is_file() or corpus.read_bytes() != payload:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".corpus.")
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.replace(tmp, corpus)
    # FileExistsError: another process finished the same build first.
    with contextlib.suppress(FileExistsError):
        build_bm25_index(corpus, index, show_progress=False, overwrite=index.exists())
    return index, corpus


def load_tasks(
    path: str | None = None,
    *,
    seed: int = 0,
    hops: int | list[int] | None = None,
    difficulty: str | None = None,
    num_tasks: int = 500,
    split: str = "all",
    split_rule: str = "entity",
    cache_dir: str | None = None,
) -> list[Task]:
    """Generate the tasks of one SynthHop world (and make sure its search index exists)."""
    if path is not None:
        raise ValueError("synthhop generates its own data; use task_options seed/hops/difficulty, not a path")
    check_split(split, "synthhop")
    held_out([], split_rule)  # an unknown rule is refused before the world is built
    if num_tasks < 1:
        raise ValueError("synthhop: num_tasks must be >= 1")
    allowed = parse_hops(hops, difficulty)
    world = generate_world(seed)
    index, corpus = build_world_index(world, cache_dir)
    questions = generate_questions(world, num_tasks, allowed)
    tasks = []
    for number, (question, in_test) in enumerate(zip(questions, held_out(questions, split_rule), strict=True)):
        if (split == "train" and in_test) or (split == "test" and not in_test):
            continue
        hop_tag = "-".join(str(h) for h in allowed)
        tasks.append(
            Task(
                task_id=f"synthhop-w{seed}-h{hop_tag}-{number:04d}",
                question=question.text,
                gold=(question.answer,),
                metadata={
                    "dataset": "synthhop",
                    "world_seed": seed,
                    "hops": question.hops,
                    "relations": list(question.relations),
                    "support_titles": list(question.support_titles),
                    "oracle_actions": list(question.oracle_actions),
                    "wiki_index": str(index),
                    "wiki_corpus": str(corpus),
                },
            )
        )
    return refuse_empty_golds(tasks, squad, f"synthhop world {seed}")
