"""subem v4 / em_f1 v3 (reward red team, round four): hedges joined by "vs", a dash, brackets,
"?", a full stop, arrows, "nor" or a denial ("A not B") name two candidates, and within the length
cap they paid whichever one was the gold (subem 1, F1 0.5 to 0.67). Every hedge below scores on
main; the shipped golds all still pay (checked here on the shipped NQ file and the samples)."""

from __future__ import annotations

import pytest

from coa_envs.rewards import em_f1, subem
from coa_envs.rewards.em_f1 import answer_parts
from coa_envs.tasks.mhqa import DATASETS, load_tasks
from coa_envs.types import Task

TASK = Task("t", "In which country is Wudia?", gold=("Giarelora",))
HEDGES = ["Wudia vs Giarelora", "Giarelora vs. Wudia", "Wudia versus Giarelora", "Giarelora (or Wudia)",
          "Giarelora (Wudia)", "Giarelora [Wudia]", "Giarelora - Wudia", "Giarelora \u2013 Wudia",
          "Giarelora\u2014Wudia",
          "Giarelora? Wudia?", "Giarelora! Wudia", "Giarelora. Wudia", "Giarelora -> Wudia", "Giarelora \u2192 Wudia",
          "Giarelora ~ Wudia", "Giarelora \u2022 Wudia", "Giarelora\tWudia", "neither Wudia nor Giarelora",
          "Giarelora not Wudia", "Wudia rather than Giarelora", "Giarelora instead of Wudia", "Giarelora & Wudia",
          "Giarelora\u3001Wudia", "Giarelora (maybe Wudia)"]


def test_the_versions_are_bumped():
    assert subem.VERSION >= 4 and em_f1.VERSION >= 3


@pytest.mark.parametrize("answer", HEDGES)
def test_a_hedge_naming_two_candidates_pays_neither_subem_nor_f1(answer):
    assert len(answer_parts(answer, TASK.gold)) > 1, answer
    assert subem.build()(answer, TASK).score == 0.0
    assert em_f1.build(metric="f1")(answer, TASK).score == 0.0


@pytest.mark.parametrize("answer", ["Giarelora", "Giarelora.", "Giarelora?", "the country of Giarelora",
                                    "Giarelora's", "St. Giarelora", "Answer: Giarelora"])
def test_one_candidate_still_pays(answer):
    assert subem.build()(answer, TASK).score == 1.0


@pytest.mark.parametrize("gold", ["Queen (band)", "Jean-Paul Sartre", "1939\u20131945", "Yahoo!", "Not Fade Away",
                                  "Tom vs. Jerry", "Crime and Punishment", "Washington, D.C.", "A - Z"])
def test_a_gold_that_holds_a_separator_still_pays_itself(gold):
    task = Task("t", "Which?", gold=(gold,))
    assert subem.build()(gold, task).score == 1.0
    assert em_f1.build(metric="f1")(gold, task).score == 1.0


def _assert_every_gold_alias_pays(tasks):
    sub, f1 = subem.build(), em_f1.build(metric="f1")
    unpaid = [(t.task_id, g) for t in tasks for g in t.gold if sub(g, t).score != 1.0 or f1(g, t).score != 1.0]
    assert unpaid == []


def test_the_shipped_sample_golds_and_the_first_nq_golds_still_pay():
    tasks = [t for name in DATASETS if name != "nq" for t in load_tasks(dataset=name, allow_sample=True)]
    _assert_every_gold_alias_pays(tasks + load_tasks(dataset="nq", limit=300))


@pytest.mark.slow
def test_every_shipped_gold_alias_still_pays():
    tasks = [t for name in DATASETS for t in load_tasks(dataset=name, allow_sample=True)]
    assert len(tasks) > 3000
    _assert_every_gold_alias_pays(tasks)
