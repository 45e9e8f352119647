"""SynthHop's held-out questions never repeat a training question's entity and answer.

Under v0's rule (every fifth question held out) 2 of the default pool's 100 held-out tasks
asked about the start entity of a training question with the same answer ("In which city is
the employer of Lorcan Waegor headquartered?" -> Vitha, held out, while a training question
about Lorcan Waegor also answered Vitha): a policy that memorised the training pair earned
held-out reward. Fails on the loader before ``split_rule``.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

from coa_envs.tasks.synthhop import held_out, load_tasks


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("synthhop-split"))


def _key(task):
    return task.metadata["support_titles"][0], task.gold[0]


@pytest.mark.parametrize("difficulty", ["mixed", "hard", "medium", "easy"])
def test_no_held_out_task_shares_entity_and_answer_with_a_training_task(cache_dir, difficulty):
    train = load_tasks(difficulty=difficulty, split="train", cache_dir=cache_dir)
    test = load_tasks(difficulty=difficulty, split="test", cache_dir=cache_dir)
    trained = {_key(t) for t in train}
    assert [t.task_id for t in test if _key(t) in trained] == []
    assert len(train) + len(test) == 500


def test_only_the_two_leaking_tasks_moved_in_the_default_pool(cache_dir):
    old = {t.task_id for t in load_tasks(split="test", split_rule="index", cache_dir=cache_dir)}
    new = {t.task_id for t in load_tasks(split="test", cache_dir=cache_dir)}
    assert len(old) == 100
    assert old - new == {"synthhop-w0-h1-2-3-4-0219", "synthhop-w0-h1-2-3-4-0469"}
    assert new - old == set()
    train = load_tasks(split="train", split_rule="index", cache_dir=cache_dir)
    assert any(_key(t) in {_key(u) for u in load_tasks(split="test", split_rule="index", cache_dir=cache_dir)}
               for t in train)  # v0's rule leaks


def test_a_tasks_side_does_not_depend_on_num_tasks(cache_dir):
    small = {t.task_id for t in load_tasks(num_tasks=240, split="test", cache_dir=cache_dir)}
    large = {t.task_id for t in load_tasks(num_tasks=500, split="test", cache_dir=cache_dir)}
    assert small == {i for i in large if int(i.rsplit("-", 1)[1]) < 240}


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="split_rule"):
        held_out([], "by_answer")
    with pytest.raises(ValueError, match="split_rule"):
        load_tasks(split_rule="random")


def test_v1_is_the_leak_free_split_and_v0_warns_that_it_is_out_of_date():
    v1 = gym.make("coa/SynthHop-v1", task_options={"split": "test"}).unwrapped
    assert len(v1.tasks) == 98
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v0 = gym.make("coa/SynthHop-v0", task_options={"split": "test"}).unwrapped
    assert len(v0.tasks) == 100
    assert any("SynthHop-v0 is out of date" in str(w.message) for w in caught)
