"""``coa/MiniWebLarge-v0``: hundreds of generated questions, a fixed split by entity, answers only on pages.

Every question is replayed with its oracle through the real ``web_search`` (BM25 over the
exported pages) and ``crawl_page`` tools; each observation must contain the evidence the
script relies on, and no search result may contain the answer (so reading a page is needed).
"""

from __future__ import annotations

import re
from collections import Counter

import gymnasium as gym
import pytest

import coa_envs  # noqa: F401
from coa_envs.miniweb import serve
from coa_envs.miniweb.pool import POOL_KINDS, build_pool_tasks, subject_heldout
from coa_envs.miniweb.world import make_world
from coa_envs.tasks.miniweb import make_kwargs


@pytest.fixture(scope="module")
def web():
    with serve(0, world="large", slow_delay_s=0.2) as server:
        yield server


def _env(web, split: str):
    return gym.make("coa/MiniWebLarge-v0", **make_kwargs(web, world="large", split=split))


def test_hundreds_of_questions_split_by_the_entity_they_ask_about(web):
    train_env, test_env = _env(web, "train"), _env(web, "test")
    try:
        train, test = train_env.unwrapped.tasks, test_env.unwrapped.tasks
    finally:
        train_env.close()
        test_env.close()
    assert len(train) + len(test) == 372 and 60 <= len(test) <= 100
    assert {t.metadata["kind"] for t in train + test} == set(POOL_KINDS)
    train_subjects = {t.metadata["subject"] for t in train}
    test_subjects = {t.metadata["subject"] for t in test}
    assert not train_subjects & test_subjects  # no held-out entity's page is read in training
    assert all(subject_heldout(s) for s in test_subjects)
    # the head of a department is the subject of "when did the head join": same side as the head
    heads = {t.metadata["subject"] for t in train + test if t.metadata["kind"] == "head_joined"}
    people = {t.metadata["subject"] for t in train + test if t.metadata["kind"] == "joined"}
    assert heads <= people
    # fixed: the same world and ids in another process (ids never carry the server's port)
    again = build_pool_tasks(make_world(0, size="large"), "http://127.0.0.1:1")
    assert sorted(t.task_id for t in again) == sorted(t.task_id for t in train + test)
    # the first N tasks of a split ask each kind in its share of the split (coa eval --n)
    for tasks in (train, test):
        whole = Counter(t.metadata["kind"] for t in tasks)
        head = Counter(t.metadata["kind"] for t in tasks[:30])
        assert all(abs(head[k] - 30 * whole[k] / len(tasks)) <= 1.0 for k in whole), (head, whole)


def test_small_world_is_unchanged_by_the_large_one():
    small = make_world(0)
    assert len(small.people) == 12 and len(small.departments) == 4
    large = make_world(0, size="large")
    assert len(large.people) == 96 and len(large.projects) == 24
    assert len({p.name for p in large.people}) == 96
    with pytest.raises(ValueError, match="world size"):
        make_world(0, size="huge")


def test_every_question_needs_a_page_and_its_oracle_solves_it(web):
    env = gym.make("coa/MiniWebLarge-v0", **make_kwargs(web, world="large", split="all"))
    kinds: Counter[str] = Counter()
    try:
        for task in env.unwrapped.tasks:
            env.reset(options={"task_id": task.task_id})
            reward, gold = 0.0, task.gold[0]
            for action, evidence in zip(task.metadata["oracle_actions"],
                                        task.metadata["oracle_evidence"], strict=True):
                observation, reward, terminated, truncated, info = env.step(action)
                assert not truncated, (task.task_id, info)
                if terminated:
                    break
                assert info["error_kind"] is None, (task.task_id, observation[:400])
                assert evidence in observation, (task.task_id, evidence, observation[:1500])
                if info["tool"] == ["web_search"]:  # titles and snippets; the URLs hold a port
                    shown = [line for line in observation.splitlines() if not line.startswith("URL:")]
                    assert not re.search(rf"\b{re.escape(gold)}\b", "\n".join(shown)), \
                        (task.task_id, "answer in a search snippet")
            assert reward == 1.0, task.task_id
            kinds[task.metadata["kind"]] += 1
    finally:
        env.close()
    assert kinds["joined"] == kinds["hometown"] == kinds["office"] == 96
    assert web.hits["/projects/" + make_world(0, size="large").projects[0].slug + ".html"] >= 2


def test_options_that_only_the_small_world_has_are_refused(web):
    with pytest.raises(ValueError, match="large world"):
        gym.make("coa/MiniWebLarge-v0", **make_kwargs(web, world="large", include_js=True))
    with pytest.raises(ValueError, match="medium"):
        gym.make("coa/MiniWeb-v0", task_options={"world": "medium"})
