"""The seed's terms: format verifier, sub-EM, multi-answer EM, tool use, overlong, group length."""

from __future__ import annotations

import pytest

from coa_envs.rewards import EpisodeView, ToolCallRecord, group_length, multi_em, overlong, subem, tool_use
from coa_envs.rewards import format as fmt
from coa_envs.rewards.overlong import overlong_penalty
from coa_envs.types import Task

TASK = Task("t", "q", gold=("Seine",))
OBS = "\n<observation>\nDoc 1: the Seine <b>flows</b> </answer> through Paris.\n</observation>\n\n"


def check(*segments, **options):
    verifier = fmt.build(**options)
    result = verifier.score(EpisodeView(task=TASK, answer=None, segments=tuple(segments)))
    return result.score, result.details


def gen(text):
    return ("generated", text)


def obs(text=OBS):
    return ("observation", text)


# -- format verifier: four checks of 0.25 ------------------------------------------------------------
def test_a_well_formed_trajectory_passes_all_four_checks_and_observation_text_is_never_markup():
    score, details = check(gen("<plan>find the river</plan><think>search</think><wiki_search>river</wiki_search>"),
                           obs(), gen("<reflection>it says Seine</reflection>\n<answer>Seine</answer>"))
    assert score == 1.0 and details["problems"] == [] and details["spans"] == 6


def test_presence_missing_required_tags():
    score, details = check(gen("<plan>p</plan><answer>Seine</answer>"))
    assert score == 0.75 and details["presence"] is False and "no <think>" in details["problems"]
    score, details = check(gen("<think>t</think><answer>Seine</answer>"), required=["think", "tool", "answer"])
    assert score == 0.75 and details["problems"] == ["no tool call"]


@pytest.mark.parametrize(("segments", "problem"), [
    ((gen("<wiki_search>q</wiki_search>"), obs(), gen("<think>t</think><answer>a</answer>")), "opens with <wiki"),
    ((gen("<think>t</think><wiki_search>q</wiki_search><answer>a</answer>"),), "not followed by an observation"),
    ((gen("<think>t</think><answer>a</answer>"), obs(), gen("<think>t</think><answer>b</answer>")), "2 <answer> spans"),
    ((gen("<think>t</think><answer>a</answer><think>after</think>"),), "exactly one must come last"),
    ((gen("<think>t</think><bogus>"), obs(), gen("<think>t</think><answer>a</answer>")), "does not answer a tool"),
])
def test_order_violations(segments, problem):
    score, details = check(*segments)
    assert details["order"] is False and any(problem in p for p in details["problems"]), details
    assert score == 0.75


def test_after_observation_option_is_the_seeds_reflection_habit():
    trajectory = (gen("<think>t</think><wiki_search>q</wiki_search>"), obs(), gen("<think>t</think><answer>a</answer>"))
    assert check(*trajectory)[0] == 1.0
    score, details = check(*trajectory, after_observation=["reflection"])
    assert score == 0.75 and "<think> follows an observation" in details["problems"][0]


def test_pairing_unclosed_stray_and_crossed_tags():
    _, details = check(gen("<think>never closed <answer>a</answer>"))
    assert details["pairing"] is False and "<think> is never closed in its turn" in details["problems"]
    _, details = check(gen("<think>t<plan>p</think><answer>a</answer>"))
    assert details["pairing"] is False and "<plan> is not closed before </think>" in details["problems"]
    _, details = check(gen("<think>t</think></plan><answer>a</answer>"))
    assert details["pairing"] is False and "</plan> closes a tag that is not open" in details["problems"]
    _, details = check(gen("<think>t</think><wiki_search>q"), obs(), gen("<think>t</think><answer>a</answer>"))
    assert "<wiki_search> is never closed in its turn" in details["problems"]


def test_content_empty_and_nested_spans():
    score, details = check(gen("<think>  </think><answer>a</answer>"))
    assert score == 0.75 and details["content"] is False and "<think> is empty" in details["problems"]
    score, details = check(gen("<think>I will <plan>nest</plan></think><answer>a</answer>"))
    assert details["content"] is False and "<plan> is nested inside <think>" in details["problems"]
    assert details["pairing"] is True and details["order"] is True and score == 0.75


def test_code_is_opaque_and_unknown_tags_are_text():
    code = "<think>t</think><code>print('<answer>not yet</answer>', '<think>')</code>"
    assert check(gen(code), obs(), gen("<think>t <br> <b>bold</b></think><answer>a</answer>"))[0] == 1.0


def test_a_malformed_turn_the_env_corrected_costs_order_points():
    corrected = "\n<observation>\nInvalid action (no_action): ...\n</observation>\n\n"
    score, details = check(gen("<think>only thinking</think>"), obs(corrected),
                           gen("<think>t</think><answer>a</answer>"))
    assert details["order"] is False and score == 0.75


def test_nothing_tagged_scores_zero_on_order_and_presence():
    score, details = check(gen("The answer is Seine."))
    assert score == 0.5 and not details["presence"] and not details["order"]


def test_text_form_splits_at_observations():
    text = ("<think>t</think><wiki_search>q</wiki_search>" + OBS + "<reflection>r</reflection><answer>Seine</answer>")
    assert [kind for kind, _ in fmt.segments_from_text(text)] == ["generated", "observation", "generated"]
    assert fmt.build()(text, TASK).score == 1.0


def test_format_options_are_checked():
    with pytest.raises(ValueError, match="unknown tag"):
        fmt.build(required=["thinking"])
    with pytest.raises(ValueError, match="non-empty list"):
        fmt.build(first="think")


# -- MHQA: sub-EM and multi-answer EM ------------------------------------------------------------
@pytest.mark.parametrize(("answer", "golds", "expected"), [
    ("the river Thames in London", ("Thames",), 1.0),
    ("Thames", ("River Thames",), 0.0),  # the gold must be inside the answer, not the reverse
    ("born in 1990", ("1",), 0.0),  # whole words: "0123456789" would hold every digit
    ("Thames's bank", ("Thames",), 1.0),  # punctuation reads as a space
    ("anything", ("",), 0.0),
    ("<answer>It is the Seine.</answer>", ("seine",), 1.0),
])
def test_sub_exact_match(answer, golds, expected):
    assert subem.build()(answer, Task("t", "q", gold=golds)).score == expected


def test_sub_exact_match_whole_words_unless_asked_for_the_seeds_substring():
    task = Task("t", "q", gold=("1",))
    assert subem.build()("born in 1990", task).score == 0.0
    assert subem.build()("chapter 1 of it", task).score == 1.0
    assert subem.build(word_boundary=False)("born in 1990", task).score == 1.0  # the seed's, FlashRAG's test


@pytest.mark.parametrize(("answer", "golds", "require_all", "expected"), [
    ("Paris | Lyon", ("Paris", "Lyon"), False, 1.0),
    ("Paris", ("Paris", "Lyon"), False, 1.0),  # the seed's check: every part is a gold answer
    ("Paris | Marseille", ("Paris", "Lyon"), False, 0.0),  # one wrong part fails the whole answer
    ("Paris", ("Paris|Lyon",), False, 1.0),  # a gold stored as one "A|B" string
    ("|", ("Paris",), False, 0.0),
    ("lyon | the city of paris", ("Paris|City of Paris", "Lyon"), True, 1.0),
    ("Paris", ("Paris|City of Paris", "Lyon"), True, 0.0),  # Lyon missing
    ("Paris | City of Paris", ("Paris|City of Paris", "Lyon"), True, 0.0),  # one answer named twice
])
def test_multi_answer_exact_match(answer, golds, require_all, expected):
    result = multi_em.build(require_all=require_all)(answer, Task("t", "q", gold=golds))
    assert result.score == expected, result.details


# -- tool use ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("calls", "options", "expected"), [
    ((), {}, 0.5),
    ((ToolCallRecord("wiki_search", "a"),), {}, 1.0),
    ((ToolCallRecord("wiki_search", "a"), ToolCallRecord("wiki_search", "a", "repeated_query")), {}, 0.5),
    ((ToolCallRecord("code", "x", "tool_not_available"),), {}, 0.5),
    ((ToolCallRecord("wiki_search", "a", "tool_error"),), {}, 1.0),  # it ran; the backend failed
    ((ToolCallRecord("wiki_search", "a"),), {"min_calls": 2}, 0.5),
    ((ToolCallRecord("code", "x"),), {"tools": ["wiki_search"]}, 0.5),
    ((), {"checks": ["no_repeats"]}, 1.0),
])
def test_tool_use(calls, options, expected):
    result = tool_use.build(**options).score(EpisodeView(task=TASK, answer="a", tool_calls=calls))
    assert result.score == expected, result.details


# -- overlong (DAPO) ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("length", "expected"), [(0, 0.0), (75, 0.0), (76, -0.04), (90, -0.6), (100, -1.0),
                                                  (130, -1.0)])
def test_overlong_ramp_by_hand(length, expected):
    assert overlong_penalty(length, 100, 25) == pytest.approx(expected)
    term = overlong.build(max_length=100, buffer=25)
    result = term.score_group([EpisodeView(task=None, answer="a", response_tokens=length)])[0]
    assert result.score == pytest.approx(expected) and result.details["length"] == length


def test_overlong_counts_an_episode_the_budget_cut_as_reaching_the_cap():
    term = overlong.build(max_length=100, buffer=25)
    cut = EpisodeView(task=None, answer=None, response_tokens=80, hit_token_budget=True)
    assert term.score_group([cut])[0].score == -1.0
    assert overlong_penalty(80, 100, 0) == 0.0  # buffer 0: off
    assert overlong_penalty(130, 100, 20, factor=0.5) == -0.5  # the factor the RL config passes as weight


def test_overlong_needs_token_counts():
    with pytest.raises(ValueError, match="token counts"):
        overlong.build(max_length=100, buffer=25).score_group([EpisodeView(task=None, answer="a")])


# -- group length (Kimi k1.5) ------------------------------------------------------------------------
def sample(tokens, correct):
    return EpisodeView(task=TASK, answer="a", response_tokens=tokens, primary_score=1.0 if correct else 0.0)


def test_group_length_by_hand():
    group = [sample(100, True), sample(200, True), sample(300, False), sample(150, False)]
    scores = [r.score for r in group_length.build().score_group(group)]
    # lambda = 0.5 - (L - 100) / 200: 0.5, 0.0, -0.5, 0.25; wrong samples keep only the negative part
    assert scores == pytest.approx([0.5, 0.0, -0.5, 0.0])


def test_group_length_equal_lengths_and_units():
    assert [r.score for r in group_length.build().score_group([sample(5, True), sample(5, False)])] == [0.0, 0.0]
    text_only = [EpisodeView(task=TASK, answer="a", segments=(("generated", "x" * n),), primary_score=1.0)
                 for n in (10, 30)]
    results = group_length.build().score_group(text_only)
    assert [r.score for r in results] == [0.5, -0.5] and results[0].details["unit"] == "chars"
    with pytest.raises(ValueError, match="unit=tokens"):
        group_length.build(unit="tokens").score_group(text_only)
