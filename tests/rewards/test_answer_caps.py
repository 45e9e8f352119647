"""Sub-string match and F1 do not pay for copied pages or lists of candidates; EM ignores empty golds."""

from __future__ import annotations

import pytest

from coa_envs.rewards import em_f1, subem
from coa_envs.rewards.em_f1 import answer_parts, length_cap
from coa_envs.types import Task

TASK = Task("t", "In which country is Wudia?", gold=("Giarelora",))
PAGE = ("Doc 1 (Title: Wudia) Wudia is a city in the country of Giarelora. The town was founded around the year "
        "1639 and is known for a botanical garden.")


def test_the_cap_is_twice_the_longest_gold_plus_three():
    assert length_cap(["Giarelora"]) == 5 and length_cap(["Giarelora", "the Republic of Giarelora"]) == 9
    assert length_cap(["The"]) == 3  # a gold that normalises to nothing counts 0 tokens


@pytest.mark.parametrize(("answer", "score"), [
    ("Giarelora", 1.0),
    ("the country of Giarelora", 1.0),  # context words within the cap still match, as the seed's subem does
    (PAGE, 0.0),  # the copied page contains the gold: over the cap
    ("Wudia, Giarelora", 0.0),  # a list of candidates: every candidate must be right
    ("Wudia or Giarelora", 0.0),
    ("Wudia\nGiarelora", 0.0),
    ("Giarelora; Giarelora", 1.0),  # the same answer twice is one answer
    ("Wudia,Giarelora", 0.0),  # glued lists: normalisation made one word of them, which held the gold
    ("Wudia/Giarelora", 0.0),
    ("Wudia&Giarelora", 0.0),
    ("WudiaGiarelora", 0.0),
    (",".join(["Wudia", "Repae", "Reicetrond"] * 4 + ["Giarelora"]), 0.0),
    ("Giarelora's", 1.0),
])
def test_subem_refuses_copies_and_lists(answer, score):
    result = subem.build()(answer, TASK)
    assert result.score == score, result.details


def test_f1_scores_zero_over_the_cap_and_the_worst_listed_candidate():
    reward = em_f1.build(metric="f1")
    copied = reward(PAGE, TASK)
    assert copied.score == 0.0 and copied.details["over_length_cap"] and copied.details["f1_official"] > 0
    listed = reward("Wudia, Giarelora, Repae", TASK)
    assert listed.score == 0.0 and listed.details["candidates"] == ["Wudia", "Giarelora", "Repae"]
    assert reward("Giarelora", TASK).score == 1.0


def test_separators_inside_a_gold_do_not_split():
    assert answer_parts("Washington, D.C.", ["Washington, D.C."]) == ["Washington, D.C."]
    assert answer_parts("Tom and Jerry", ["Tom and Jerry"]) == ["Tom and Jerry"]
    assert answer_parts("1,000", ["1000"]) == ["1,000"]
    assert subem.build()("Washington, D.C.", Task("t", "q", gold=("Washington, D.C.",))).score == 1.0


@pytest.mark.parametrize(("answer", "gold"), [("0123456789", "7"), ("1990", "1"), ("abcdefghij", "c")])
def test_a_glued_constant_holds_no_gold(answer, gold):
    """A constant answer that glues every candidate into one word matched any gold inside it."""
    assert subem.build()(answer, Task("t", "q", gold=(gold,))).score == 0.0


def test_glued_words_count_toward_the_cap_and_numbers_keep_their_separators():
    result = subem.build()(",".join(["Wudia"] * 9 + ["Giarelora"]), TASK)
    assert result.score == 0.0 and result.details["answer_tokens"] == 10 and result.details["over_length_cap"]
    for answer, gold in (("1,000", "1000"), ("1/2", "1/2"), ("AC/DC", "AC/DC"), ("US", "U.S."), ("U.S.", "US")):
        assert subem.build()(answer, Task("t", "q", gold=(gold,))).score == 1.0, (answer, gold)


@pytest.mark.parametrize("answer", ["The.", "", ")", "a", "the the"])
def test_golds_that_normalise_to_nothing_never_match(answer):
    task = Task("t", "q", gold=(")", "---", "A+"))
    for reward in (em_f1.build(), em_f1.build(metric="f1"), subem.build()):
        assert reward(answer, task).score == 0.0
    assert em_f1.build()(answer, task).details["refused_golds"] == [")", "---", "A+"]
