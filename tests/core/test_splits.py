"""Training and held-out tasks never overlap, for every registered id (the ``split`` option)."""

from __future__ import annotations

import importlib
import re

import gymnasium as gym
import pytest

import coa_envs
from coa_envs.config import build_config
from coa_envs.registry import entry
from coa_envs.tasks.split import TEST_SET_NOTE, is_heldout, partition
from coa_envs.types import Task
from tests.env_fixtures import MAKE_KWARGS

ALL_IDS = coa_envs.ids()
# The first held-out ids of a fixed toy pool: a change of the hash seed or the fraction moves
# tasks between the sides, so this pin fails and the affected ids must be bumped.
PINNED_FIRST_HELD_OUT = ["5", "10", "11", "12", "16"]


def _load(env_id: str, split: str) -> list[Task]:
    """The id's tasks for ``split``, through its family loader with the registry's options."""
    config = build_config(entry(env_id), MAKE_KWARGS.get(env_id, {}))
    family = importlib.import_module(f"coa_envs.tasks.{config.family}")
    options = {**config.tasks, "split": split}
    # A family with a live resource (the mini-web's server) is opened and closed as the env would.
    runtime = family.open_runtime(options) if hasattr(family, "open_runtime") else None
    try:
        return list(family.load_tasks(**options, **(runtime.task_options if runtime else {})))
    finally:
        if runtime is not None:
            runtime.close()


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower())


def _is_test_set(env_id: str) -> bool:
    """A benchmark id's data is a test set, shipped or given as data_path (the fixtures here)."""
    family = importlib.import_module(f"coa_envs.tasks.{entry(env_id)['family']}")
    return family.SPLIT_NOTE == TEST_SET_NOTE


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_train_and_test_tasks_never_overlap(env_id):
    everything = _load(env_id, "all")
    test = _load(env_id, "test")
    if _is_test_set(env_id):
        with pytest.raises(ValueError, match=r"test set.*data_path"):
            _load(env_id, "train")
        assert [t.task_id for t in test] == [t.task_id for t in everything]
        return
    train = _load(env_id, "train")
    train_ids, test_ids = {t.task_id for t in train}, {t.task_id for t in test}
    assert not train_ids & test_ids
    # Not only ids: no held-out question is also a training question (duplicates cannot leak).
    assert not {_norm(t.question) for t in train} & {_norm(t.question) for t in test}
    assert train_ids | test_ids == {t.task_id for t in everything}
    if len(everything) >= 50:  # a real partition, not everything on one side
        assert 0.1 < len(test) / len(everything) < 0.3, (len(test), len(everything))


@pytest.mark.parametrize("env_id", [i for i in ALL_IDS if _is_test_set(i)])
def test_benchmark_test_sets_refuse_training_and_say_how_to_train(env_id):
    with pytest.raises(ValueError, match=r"test set.*data_path.*'pool': True.*split='all'"):
        gym.make(env_id, **{**MAKE_KWARGS.get(env_id, {}), "task_options": {"split": "train"}})


def _math_file(tmp_path, count: int = 200) -> str:
    rows = "\n".join(f'{{"question": "What is {i} + {i}?", "answer": "{2 * i}"}}' for i in range(count))
    (tmp_path / "mine.jsonl").write_text(rows + "\n", encoding="utf-8")
    return str(tmp_path / "mine.jsonl")


def _sizes(env_id: str, **kwargs) -> dict[str, int]:
    sizes = {}
    for split in ("test", "all", "train"):
        options = {**kwargs.pop("task_options", {}), "split": split}
        try:
            env = gym.make(env_id, **kwargs, task_options=options)
        except ValueError:
            continue
        sizes[split] = len(env.unwrapped.tasks)
        kwargs["task_options"] = {k: v for k, v in options.items() if k != "split"}
        env.close()
    return sizes


def test_a_data_file_given_to_a_benchmark_id_is_a_test_set_played_whole(tmp_path):
    """`coa eval coa/GAIA-v1 --data gaia_dev.jsonl` played 21 of 103 tasks: a benchmark's file
    was split 80/20 like a training pool. It is a test set: test and all give every task."""
    assert _sizes("coa/MATH500-v1", data_path=_math_file(tmp_path)) == {"test": 200, "all": 200}
    for env_id, kwargs in MAKE_KWARGS.items():
        if "data_path" in kwargs and _is_test_set(env_id):  # GAIA, BrowseComp, HLE, LiveCodeBench files
            sizes = _sizes(env_id, **kwargs)
            assert set(sizes) == {"test", "all"} and sizes["test"] == sizes["all"], (env_id, sizes)


def test_a_training_file_marked_pool_is_split_80_20(tmp_path):
    sizes = _sizes("coa/MATH500-v1", data_path=_math_file(tmp_path), task_options={"pool": True})
    assert sizes["train"] + sizes["test"] == sizes["all"] == 200 and 20 < sizes["test"] < 60
    with pytest.raises(ValueError, match="pool=true marks a data file"):  # never the shipped benchmark
        gym.make("coa/MATH500-v1", task_options={"pool": True, "split": "train"})


def test_the_partition_is_fixed_and_ignores_order_case_and_spacing():
    tasks = [Task(task_id=str(i), question=f"Question number {i}?") for i in range(300)]
    test = partition(tasks, "test", "here")
    assert [t.task_id for t in partition(list(reversed(tasks)), "test", "here")] == [t.task_id for t in reversed(test)]
    assert all(is_heldout(f"  QUESTION   number {t.task_id}? ") for t in test)
    assert [t.task_id for t in test][:5] == PINNED_FIRST_HELD_OUT


def test_unknown_split_is_refused_with_the_allowed_values():
    with pytest.raises(ValueError, match=r"split='dev'.*\['train', 'test', 'all'\]"):
        gym.make("coa/NQ-v1", task_options={"split": "dev"})


def test_mhqa_source_split_still_picks_the_file(tmp_path):
    (tmp_path / "nq").mkdir()
    (tmp_path / "nq" / "train.jsonl").write_text('{"question": "q1?", "golden_answers": ["x"]}\n')
    from coa_envs.tasks.mhqa import load_tasks

    tasks = load_tasks(str(tmp_path), dataset="nq", source_split="train")
    assert tasks[0].metadata["source_split"] == "train"
    with pytest.raises(ValueError, match="source_split names a file split"):
        load_tasks(str(tmp_path), dataset="nq", source_split="all")

