"""Math equivalence: math-verify semantics, \\boxed{} accepted, unparsable LaTeX never crashes."""

from __future__ import annotations

import threading

import pytest

from coa_envs.rewards.math_verify import build, normalise_latex
from coa_envs.types import Task

reward = build()


def task(*gold: str) -> Task:
    return Task(task_id="t", question="q", gold=gold)


@pytest.mark.parametrize(
    ("prediction", "gold", "score"),
    [
        ("\\boxed{204}", "204", 1.0),
        ("204", "204", 1.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", 1.0),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0),
        ("\\boxed{205}", "204", 0.0),
        ("The answer is \\boxed{27}", "27.0", 1.0),
        ("", "1", 0.0),
        ("\\boxed{\\frac{", "1", 0.0),
        ("\\boxed{\\unknownmacro{x}^{^}}", "\\unknownmacro{x}^{^}", 1.0),
    ],
)
def test_math_equivalence_table(prediction, gold, score):
    assert reward(prediction, task(gold)).score == score


def test_any_gold_alias_counts():
    assert reward("\\boxed{7}", task("3", "7")).score == 1.0


def test_works_off_the_main_thread_where_signal_timeouts_are_unavailable():
    results = []
    worker = threading.Thread(target=lambda: results.append(reward("\\boxed{\\frac{2}{4}}", task("1/2")).score))
    worker.start()
    worker.join()
    assert results == [1.0]


def test_string_fallback_normal_form():
    assert normalise_latex("$\\left(1,2\\right)$.") == normalise_latex("(1, 2)")


def test_off_main_thread_checks_keep_math_verify_timeouts(caplog):
    """Worker threads score in a helper process whose main thread can arm math-verify's alarms."""
    from concurrent.futures import ThreadPoolExecutor

    cases = [("\\boxed{\\frac{2}{4}}", "1/2", 1.0), ("\\boxed{3}", "4", 0.0), ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", 1.0)]
    with caplog.at_level("WARNING"), ThreadPoolExecutor(3) as pool:
        scores = list(pool.map(lambda c: reward(c[0], task(c[1])).score, cases))
    assert scores == [c[2] for c in cases]
    assert "Timeout is disabled" not in caplog.text


def test_a_helper_retired_by_two_threads_at_once_is_retired_quietly():
    """Two threads whose calls failed on the same helper both retire it; the second used to
    raise AttributeError ('NoneType' object has no attribute 'values': the pool's process table
    is gone after the first shutdown), which made a correct answer a reward error."""
    from coa_envs.rewards import math_verify

    pool, ready = math_verify._helper_pool()
    ready.result(timeout=300)
    math_verify._drop_helper(pool)
    math_verify._drop_helper(pool)  # the other thread, a moment later
    assert reward("\\boxed{5}", task("5")).details.get("method") == "math_verify"  # main thread, no helper


def test_an_answer_whose_helper_another_thread_retired_is_scored_on_a_fresh_one():
    """A thread that took the shared helper just before another thread's answer timed out and
    retired it (shut down, processes killed) scores its own answer on a new helper."""
    from coa_envs.rewards import math_verify

    pool, ready = math_verify._helper_pool()
    ready.result(timeout=300)
    math_verify._drop_helper(pool)
    with math_verify._helper_lock:  # what this thread still holds: the retired helper
        math_verify._helper = (pool, ready)
    results: list = []
    worker = threading.Thread(target=lambda: results.append(reward("\\boxed{\\frac{2}{4}}", task("1/2"))))
    worker.start()
    worker.join()
    assert [r.score for r in results] == [1.0], results[0].details
    assert math_verify._helper is not None and math_verify._helper[0] is not pool


def test_many_threads_score_alike_on_a_fresh_helper():
    """Eight threads at once on a helper not yet started: its start-up is not charged to any
    answer (under load it used to run past an answer's limit and retire the helper under the
    other threads)."""
    from concurrent.futures import ThreadPoolExecutor

    from coa_envs.rewards import math_verify

    if math_verify._helper is not None:
        math_verify._drop_helper(math_verify._helper[0])
    cases = [(f"\\boxed{{{i}}}", str(i if i % 2 else i + 1)) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(lambda c: reward(c[0], task(c[1])).score, cases))
    assert scores == [float(i % 2) for i in range(8)]


# -- one final answer per reply -----------------------------------------------------------------
@pytest.mark.parametrize(
    "prediction",
    [
        "\\boxed{204} The final answer is $211$.",  # the reply: the fallback used to OR the two
        "The final answer is $211$. \\boxed{204}",
        "\\boxed{204}\\boxed{211}",
        "\\fbox{211} \\boxed{204}",
        "The answer is 204. The final answer is 211.",
        "Answer: 204\nFinal answer: 211",
        "204 or 211",
        "either 204 or 211",
        "211 (or 204)",
        "$204$ or $211$",
        "204 \\lor 211",
        "211 \\vee 204",
        "204 | 211",
        "204; 211",
        "204\n211",
        "\\boxed{204, 211}",
        "\\boxed{\\{204, 211\\}}",
        "\\boxed{204 \\text{ or } 211}",
        "x = 204 \\text{ or } x = 211",
        "The final answer is 204 \\boxed{211}",
        "The answer is 204 or maybe 211.",
        "Final Answer: 211\n\nAlternatively, 204",  # a second answer offered in prose
        "\\boxed{211}. Or possibly $204$.",
        "\\boxed{211}. If not, 204.",
        "211, otherwise 204",
        "\\boxed{211}. Alternatively, $\\sqrt{204}$",
    ],
)
def test_several_distinct_answers_are_wrong_even_when_one_is_right(prediction):
    result = reward(prediction, task("211"))
    assert result.score == 0.0, result.details


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("\\boxed{211} The final answer is $211$.", "211"),  # the same answer twice is one answer
        ("The final answer is $\\frac{1}{2}$.", "0.5"),
        ("Answer: 211", "211"),
        ("211 or 211", "211"),
        ("5 or -5", "\\pm 5"),  # alternatives are a set: right when the gold is that set
        ("\\boxed{x = 211}", "211"),
        ("$3\\sqrt{2}$", "3\\sqrt{2}"),
        ("The answer is therefore \\boxed{211}.", "211"),
        ("The final answer is 211, since 200 + 11 = 211.", "211"),
        ("The answer is (1, 2).", "(1, 2)"),
        ("The answer is \\boxed{211}. Otherwise the sum would be odd.", "211"),  # prose, not a value
        ("\\boxed{2}. Alternatively written as $\\frac{4}{2}$.", "2"),
        ("\\boxed{211}. Alternatively, \\boxed{211}", "211"),
    ],
)
def test_one_answer_stated_once_or_repeated_still_scores(prediction, gold):
    assert reward(prediction, task(gold)).score == 1.0


def test_string_fallback_only_when_math_verify_cannot_parse():
    # both sides parse and differ: no second chance by string comparison
    assert reward("\\boxed{2+2}", task("4")).details["method"] == "math_verify"
    assert reward("\\boxed{5}", task("4")).score == 0.0
    unparseable = reward("\\boxed{\\unknownmacro{x}^{^}}", task("\\unknownmacro{x}^{^}"))
    assert unparseable.score == 1.0 and unparseable.details["method"] == "string_fallback"
