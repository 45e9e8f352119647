"""math_verify v6: an escaped dollar sign inside ``$...$`` does not end the formula.

MATH-500 has money answers written ``\\$32,\\!348`` and ``\\$18.90``; a reply that stated the
gold in the same form ("The final answer is $\\$32,\\!348$.") was read as the formula ``\\``
and scored 0: the only two shipped golds that did not score when stated in a sentence.
"""

from __future__ import annotations

import pytest

from coa_envs.rewards.math_verify import answer_candidates, build
from coa_envs.tasks.math import load_tasks
from coa_envs.types import Task

reward = build()


@pytest.mark.parametrize("task_id", ["MATH500-242", "MATH500-459"])
def test_a_money_answer_stated_in_a_sentence_scores(task_id):
    task = next(t for t in load_tasks(dataset="math500") if t.task_id == task_id)
    gold = task.gold[0]
    assert gold.startswith("\\$")
    assert reward(f"The final answer is ${gold}$.", task).score == 1.0
    assert reward(f"The final answer is ${gold}1$.", task).score == 0.0


def test_the_formula_runs_to_the_unescaped_dollar():
    assert answer_candidates("The final answer is $\\$32,\\!348$.") == ["\\$32,\\!348"]
    assert answer_candidates("answer: $5$ dollars and $6$") == ["5"]


def test_a_second_money_value_offered_beside_it_is_still_a_second_answer():
    task = Task("t", "How much?", gold=("\\$5",))
    assert reward("The answer is $\\$5$. Alternatively, $\\$6$.", task).score == 0.0
    assert reward("The answer is $\\$5$.", task).score == 1.0
