"""Which tasks are for training and which are held out: the ``split`` loader option.

Every family takes ``split`` = ``train`` | ``test`` | ``all`` (``all`` is the default of
``gym.make``; ``coa eval`` asks for ``test``, RL trains on ``train`` and evaluates on ``test``).
A source is one of two kinds:

* a **test set**: the benchmark data of the math, code and web ids -- what they ship or find
  themselves (MATH-500, AIME, LiveCodeBench, GAIA, ...) *and a data file of yours given to
  one of them* (``data_path``, ``coa eval --data``: a benchmark's file is its test set).
  ``test`` and ``all`` give every task, so ``coa eval`` plays all of them; ``train`` is
  refused (:func:`refuse_training`) with a message that says how to train instead, so nothing
  is trained on a test set by accident;
* a **pool**: generated worlds (SynthHop, MiniWeb), the multi-hop QA files (the shipped NQ
  file and any ``data_path`` given to a QA id), and a data file of a math, code or web id
  marked ``task_options={'pool': True}`` (a training file). Without a partition of its own, a
  pool is split by :func:`is_heldout`: a task is held out when the SHA-256 of
  ``"coa-envs/split/v1:" + its normalised question`` falls in the lowest 20% of the hash
  range. The partition is fixed (the same on every machine, in every process), independent
  of file order, ``limit`` and rows added later, and identical questions always land on the
  same side, so a duplicated question cannot leak from training into evaluation. SynthHop
  keeps its own fixed 80/20 split (every fifth generated question is held out).

:func:`benchmark_split` applies this to a math, code or web loader's tasks.

Stdlib only (and the leaf :mod:`coa_envs.options`): imported by every loader.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Literal

from coa_envs.errors import OptionError
from coa_envs.options import did_you_mean
from coa_envs.types import Task

__all__ = [
    "HASH_SEED",
    "POOL_NOTE",
    "SPLITS",
    "SPLIT_LEGEND",
    "TEST_FRACTION",
    "TEST_SET_NOTE",
    "Split",
    "SplitError",
    "benchmark_split",
    "check_split",
    "in_split",
    "is_heldout",
    "partition",
    "refuse_training",
    "select_test_set",
]

Split = Literal["train", "test", "all"]
SPLITS: tuple[str, ...] = ("train", "test", "all")
TEST_FRACTION = 0.2
HASH_SEED = "coa-envs/split/v1"
"""Changing it (or ``TEST_FRACTION``) moves tasks between sides: bump every affected id."""

# What `coa list` says about a family's split (each family module sets SPLIT_NOTE).
TEST_SET_NOTE = "test set"
POOL_NOTE = "train/test 80/20"
SPLIT_LEGEND = (
    "split: a 'test set' (also a data file given to it) is played whole and refuses split=train "
    "(a training file: task_options pool=true splits it 80/20); 'train/test 80/20' is a fixed "
    "partition; coa eval uses --split test by default"
)

_SPACES = re.compile(r"\s+")


class SplitError(OptionError):
    """A ``split`` that is not valid, or ``train`` on a test set (the CLI names ``--split``)."""


def check_split(split: str, where: str) -> str:
    """Validate a ``split`` option; ``where`` names the loader in the error."""
    if split not in SPLITS:
        raise SplitError(f"{where}: split={split!r} is not valid{did_you_mean(split, SPLITS)}; "
                         f"allowed: {list(SPLITS)}")
    return split


def is_heldout(question: str) -> bool:
    """True when ``question`` belongs to the held-out 20% of a pool (see the module docstring)."""
    normalised = _SPACES.sub(" ", question.strip().lower())
    digest = hashlib.sha256(f"{HASH_SEED}:{normalised}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < int(TEST_FRACTION * 2**64)


def in_split(question: str, split: str) -> bool:
    """Whether a pool task with this question belongs to ``split`` (``all`` holds every task)."""
    return split == "all" or is_heldout(question) == (split == "test")


def partition(tasks: Sequence[Task], split: str, where: str) -> list[Task]:
    """The tasks of a pool that belong to ``split``, in their original order."""
    check_split(split, where)
    return [t for t in tasks if in_split(t.question, split)]


def refuse_training(what: str, family_hint: str) -> SplitError:
    """The error for ``split='train'`` on a benchmark test set; says how to train instead."""
    return SplitError(
        f"{what} is a test set: its tasks are for evaluation only, so split='train' is refused. "
        f"To train, give a training file of your own with data_path and mark it a pool (e.g. "
        f"gym.make(ID, data_path='train.jsonl', task_options={{'pool': True, 'split': 'train'}}), or "
        f"`--data train.jsonl -e task_options.pool=true --split train` on the command line): "
        f"split='train' then takes a fixed 80% of that file, 'test' the other 20% and split='all' "
        f"all of it. {family_hint}"
    )


def benchmark_split(tasks: Sequence[Task], split: str, *, what: str, data_file: bool, pool: bool,
                    family_hint: str = "") -> list[Task]:
    """``split`` of a math, code or web loader's tasks: a test set (shipped data or a data file
    given to the benchmark id: every task for ``test``/``all``), or, for a ``data_file`` marked
    ``pool``, the fixed 80/20 partition."""
    if pool and not data_file:
        raise SplitError(f"{what}: pool=true marks a data file of yours as a training pool; the shipped "
                         "benchmark is a test set and is never split (give data_path=...)")
    if pool:
        return partition(tasks, split, what)
    return select_test_set(tasks, split, what, family_hint)


def select_test_set(tasks: Sequence[Task], split: str, what: str, family_hint: str = "") -> list[Task]:
    """``split`` applied to a benchmark test set: ``test``/``all`` keep every task."""
    check_split(split, what)
    if split == "train":
        raise refuse_training(what, family_hint)
    return list(tasks)
