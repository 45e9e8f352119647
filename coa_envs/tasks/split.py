"""Which tasks are for training and which are held out: the ``split`` loader option.

Every family takes ``split`` = ``train`` | ``test`` | ``all`` (``all`` is the default of
``gym.make``; ``coa eval`` asks for ``test``, RL trains on ``train`` and evaluates on ``test``).
A source is one of two kinds:

* a **test set**: the benchmark data the math, code and web ids ship or find themselves
  (MATH-500, AIME, LiveCodeBench, GAIA, ...). ``test`` and ``all`` give every task;
  ``train`` is refused (:func:`refuse_training`) with a message that says how to give a
  training file instead, so nothing can be trained on a benchmark by accident;
* a **pool**: generated worlds (MiniWeb), the shipped NQ file, and any file passed as
  ``data_path``. Without a partition of its own, a pool is split by :func:`is_heldout`: a
  task is held out when the SHA-256 of ``"coa-envs/split/v1:" + its normalised question``
  falls in the lowest 20% of the hash range. The partition is fixed (the same on every
  machine, in every process), independent of file order, ``limit`` and rows added later, and
  identical questions always land on the same side, so a duplicated question cannot leak
  from training into evaluation. SynthHop keeps its own fixed 80/20 split (every fifth
  generated question is held out).

Stdlib only: imported by every loader.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Literal

from coa_envs.types import Task

__all__ = [
    "HASH_SEED",
    "POOL_NOTE",
    "SPLITS",
    "SPLIT_LEGEND",
    "TEST_FRACTION",
    "TEST_SET_NOTE",
    "Split",
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
    "split: a 'test set' refuses split=train (a data_path file of yours is split 80/20); "
    "'train/test 80/20' is a fixed partition; coa eval uses --split test by default"
)

_SPACES = re.compile(r"\s+")


def check_split(split: str, where: str) -> str:
    """Validate a ``split`` option; ``where`` names the loader in the error."""
    if split not in SPLITS:
        raise ValueError(f"{where}: split={split!r} is not valid; allowed: {list(SPLITS)}")
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


def refuse_training(what: str, family_hint: str) -> ValueError:
    """The error for ``split='train'`` on a benchmark test set; says how to train instead."""
    return ValueError(
        f"{what} is a test set: its tasks are for evaluation only, so split='train' is refused. "
        f"To train, give a training file of your own with data_path (e.g. gym.make(ID, "
        f"data_path='train.jsonl', task_options={{'split': 'train'}}), or `--data train.jsonl` on "
        f"the command line): split='train' then takes a fixed 80% of that file and split='all' "
        f"all of it. {family_hint}"
    )


def select_test_set(tasks: Sequence[Task], split: str, what: str, family_hint: str = "") -> list[Task]:
    """``split`` applied to a benchmark test set: ``test``/``all`` keep every task."""
    check_split(split, what)
    if split == "train":
        raise refuse_training(what, family_hint)
    return list(tasks)
