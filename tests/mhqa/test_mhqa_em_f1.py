"""EM/F1 must equal the official SQuAD v1.1 and HotpotQA definitions, quirks included.

Expected values are worked out by hand from the official scripts' definitions
(lower -> strip ASCII punctuation -> drop a/an/the -> squeeze whitespace; F1 over the
bag of normalised tokens; HotpotQA's yes/no/noanswer rule).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coa_envs.rewards import em_f1
from coa_envs.rewards.em_f1 import exact_match, f1_score, hotpot_f1, max_over_golds, normalize_answer
from coa_envs.types import Task

NORMALISATION = [
    ("The Eiffel Tower", "eiffel tower"),
    ("  New   York  ", "new york"),
    ("U.S.A.", "usa"),  # punctuation is deleted, not replaced by a space
    ("a.b", "ab"),
    ("an apple a day", "apple day"),
    ("Theatre at the Thermal baths", "theatre at thermal baths"),  # \b keeps "the" inside words
    ("THE END", "end"),  # lower-casing happens before article removal
    ("1,000", "1000"),
    ("$5", "5"),
    ("Röntgen", "röntgen"),  # accents are kept
    ("“Hello”", "“hello”"),  # curly quotes are not string.punctuation
    ("1914–1918", "1914–1918"),  # an en dash survives, a hyphen would not
    ("1914-1918", "19141918"),
    ("the", ""),
    ("A Tale of Two Cities", "tale of two cities"),  # capital "A" is an article once lower-cased
    ("Ångström", "ångström"),  # non-ASCII upper case is lower-cased too
    ("don't stop", "dont stop"),  # the apostrophe is deleted, no split
    ("Paris,France", "parisfrance"),
    ("new\tyork\n city", "new york city"),  # any whitespace separates tokens
    ("new\u00a0york", "new york"),  # so does a no-break space (str.split)
    ("Hello， world。", "hello， world。"),  # full-width punctuation is not string.punctuation
    ("the-the", "thethe"),  # punctuation goes first, so "the-the" is one word, not two articles
    ("l'the", "lthe"),
    ("anthem", "anthem"),  # "an" inside a word stays
    ("(the) answer", "answer"),
]


@pytest.mark.parametrize(("text", "expected"), NORMALISATION)
def test_normalisation_matches_squad_v11(text, expected):
    assert normalize_answer(text) == expected


# (prediction, golds, em, squad f1, hotpot f1)
TABLE = [
    ("the Eiffel Tower", ["Eiffel Tower"], 1.0, 1.0, 1.0),
    ("Paris!", ["paris"], 1.0, 1.0, 1.0),
    ("U.S. Army", ["US army"], 1.0, 1.0, 1.0),
    ("Dai Xiuli", ["Xiu Li Dai", "Dai Xiuli", "Dai Yongge"], 1.0, 1.0, 1.0),  # best over aliases
    ("Xiuli", ["Xiu Li Dai", "Dai Xiuli"], 0.0, 2 / 3, 2 / 3),  # P=1, R=1/2
    ("the big red dog", ["red dog"], 0.0, 0.8, 0.8),  # P=2/3, R=1
    ("dog dog dog", ["dog"], 0.0, 0.5, 0.5),  # repeated tokens count once per gold token
    ("Rontgen", ["Wilhelm Conrad Röntgen"], 0.0, 0.0, 0.0),  # no accent folding
    ("Wilhelm Conrad Röntgen", ["wilhelm conrad röntgen"], 1.0, 1.0, 1.0),
    ("“Carmen”", ["Carmen"], 0.0, 0.0, 0.0),
    ("", ["dog"], 0.0, 0.0, 0.0),
    ("the", ["a"], 0.0, 0.0, 0.0),  # both normalise to "": EM 1 in v1.1, but such a gold never matches here
    ("yes", ["yes"], 1.0, 1.0, 1.0),
    ("yes", ["yes sir"], 0.0, 2 / 3, 0.0),  # HotpotQA zeroes yes/no mismatches
    ("no answer", ["noanswer"], 0.0, 0.0, 0.0),
    ("1000", ["1,000", "one thousand"], 1.0, 1.0, 1.0),
    ("anything", [], 0.0, 0.0, 0.0),  # no gold: nothing to match
    ("no", ["No"], 1.0, 1.0, 1.0),
    ("no way", ["no"], 0.0, 2 / 3, 0.0),  # the gold is a special word and differs
    ("noanswer", ["no answer"], 0.0, 0.0, 0.0),
    ("Yes.", ["yes", "Yes, indeed"], 1.0, 1.0, 1.0),  # max over golds in every column
    ("New York City", ["new york", "NYC"], 0.0, 0.8, 0.8),  # P=2/3, R=1
    ("1914–1918", ["1914-1918"], 0.0, 0.0, 0.0),  # en dash kept, hyphen dropped: no match
    ("Mr. Smith", ["Smith"], 0.0, 2 / 3, 2 / 3),  # P=1/2, R=1
    ("東京", ["東京"], 1.0, 1.0, 1.0),
    ("東京 都", ["東京"], 0.0, 2 / 3, 2 / 3),  # tokens are whitespace-split, no CJK segmentation
    ("the the the", ["the"], 0.0, 0.0, 0.0),  # both empty after normalisation: refused (v1.1 says 1)
]


@pytest.mark.parametrize(("prediction", "golds", "em", "f1", "hotpot"), TABLE)
def test_metrics_table(prediction, golds, em, f1, hotpot):
    assert max_over_golds(exact_match, prediction, golds) == em
    assert max_over_golds(f1_score, prediction, golds) == pytest.approx(f1)
    assert max_over_golds(hotpot_f1, prediction, golds) == pytest.approx(hotpot)


_TEXT = st.text(
    alphabet=st.sampled_from(list("aAnNtThHeE .,;'\"!?-–()$1 \t\u00a0éÅ東，")) | st.characters(), max_size=40
)


@settings(max_examples=150, deadline=None)
@given(prediction=_TEXT, golds=st.lists(_TEXT, max_size=3))
def test_em_agrees_with_the_search_r1_reward_implementation(prediction, golds):
    """An independent implementation of the same definition (the ``qa_em`` of Search-R1, as
    packaged by gem-llm) must agree on arbitrary text, articles, punctuation and unicode included,
    except for golds that normalise to nothing, which never match here (any empty answer would)."""
    qa_em = pytest.importorskip("gem.utils.qa_em", reason="reference implementation from gem-llm not installed")
    assert normalize_answer(prediction) == qa_em.normalize_answer(prediction)
    ours = max_over_golds(exact_match, prediction, golds) == 1.0
    usable = [g for g in golds if normalize_answer(g)]
    assert ours == (bool(usable) and qa_em.em_check(prediction, usable))


@settings(max_examples=150, deadline=None)
@given(prediction=_TEXT, gold=_TEXT)
def test_f1_properties_of_the_squad_definition(prediction, gold):
    """Properties that pin the SQuAD bag-of-tokens F1: symmetric, in [0, 1], 1 exactly when the
    normalised token multisets are equal and non-empty, and equal to the SQuAD value on tokens."""
    f1 = f1_score(prediction, gold)
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    assert f1 == pytest.approx(f1_score(gold, prediction)) and 0.0 <= f1 <= 1.0
    same_bag = bool(pred_tokens) and sorted(pred_tokens) == sorted(gold_tokens)
    assert (f1 == pytest.approx(1.0)) == same_bag
    overlap = sum(min(pred_tokens.count(t), gold_tokens.count(t)) for t in set(pred_tokens))
    expected = 0.0 if overlap == 0 else 2 * overlap / (len(pred_tokens) + len(gold_tokens))
    assert f1 == pytest.approx(expected)
    special = {"yes", "no", "noanswer"}
    norm_pred, norm_gold = normalize_answer(prediction), normalize_answer(gold)
    zeroed = (norm_pred in special or norm_gold in special) and norm_pred != norm_gold
    assert hotpot_f1(prediction, gold) == (0.0 if zeroed else pytest.approx(f1))


def test_reward_scores_em_and_reports_f1_in_details():
    reward = em_f1.build()
    task = Task("t", "Who owns Reading FC?", gold=("Dai Yongge", "Yongge Dai"))
    exact = reward("yongge dai", task)
    partial = reward("Mr Dai Yongge of China", task)
    assert exact.score == 1.0 and exact.details["f1"] == 1.0
    assert partial.score == 0.0 and partial.details["f1"] == pytest.approx(2 * 0.4 * 1 / 1.4)
    assert partial.details["golds"] == ["Dai Yongge", "Yongge Dai"]


def test_reward_takes_the_last_answer_span_when_given_a_whole_turn():
    reward = em_f1.build()
    task = Task("t", "q", gold=("Paris",))
    assert reward("<think>hmm</think><answer>Lyon</answer> <answer> Paris </answer>", task).score == 1.0


def test_f1_metric_option_and_bad_options():
    task = Task("t", "q", gold=("red dog",))
    assert em_f1.build(metric="f1")("the big red dog", task).score == pytest.approx(0.8)
    with pytest.raises(ValueError, match="metric"):
        em_f1.build(metric="bleu")
    with pytest.raises(TypeError, match="unknown options"):
        em_f1.build(lowercase=False)


def test_task_without_gold_scores_zero_with_a_warning():
    result = em_f1.build()("Paris", Task("t", "q"))
    assert result.score == 0.0 and "no gold" in result.details["warning"]
