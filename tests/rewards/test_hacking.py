"""Degenerate policies against every reward term: what does each pay for solving nothing?

For each term of ``coa_envs.rewards`` a fixture below gives a task and the options to build
it; every degenerate policy of :mod:`coa_envs.audit.policies` that applies to the fixture's
family plays it (tool observations are the fixture's page), and the term's score must stay at
its ceiling: 0 for a correctness term, the documented shaping for the others (the format and
tool-use terms pay for format and tool use by design; that is why they are weighted below a
correctness term). A new term fails ``test_every_term_has_a_hacking_fixture`` until it gets a
fixture here, so it inherits the whole suite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from coa_envs.audit import POLICIES
from coa_envs.audit.policies import Context, DegeneratePolicy
from coa_envs.protocol import parse_turn, render_observation
from coa_envs.rewards import EpisodeView, ToolCallRecord, available_rewards, build_reward
from coa_envs.rewards.compose import primary_failed
from coa_envs.types import Task
from tests.web_envs.judge_server import judge_server

PAGE = ("Doc 1 (Title: Wudia)\nWudia is a city in the country of Giarelora. The town was founded around the year "
        "1639 and is known for a botanical garden.\n\nDoc 2 (Title: Yselde Repae)\nYselde Repae (born 1810) was a "
        "metallurgist born in Wudia. Repae studied at Reicetrond University.")
QA = Task("qa", "In which country is the city of Wudia?", gold=("Giarelora", "Republic of Giarelora"))
QA_ONE = Task("qa1", "In which country is the city of Wudia?", gold=("Giarelora",))
# NQ has golds like these: an alias that normalises to nothing beside a real one
QA_EMPTY_ALIAS = Task("qa2", "Which blood type is the universal recipient?", gold=("A+", "---", "AB+"))
QA_NUMBER = Task("qa3", "How many botanical gardens does Wudia have?", gold=("7",))
MATH = Task("math", "What is 1 + 1?", gold=("2",))  # small: the hedges list it among their candidates
CODE_STATEMENT = ("Return the sum of the two numbers.\n\nExample 1:\n\nInput: a = 1, b = 2\nOutput: 3\n\n"
                  "Constraints: 0 <= a, b <= 100")
CODE = Task("code", CODE_STATEMENT, tests={"kind": "functional", "func_name": "add", "cases": [
    {"input": "1\n2", "output": "3", "public": True},
    {"input": "40\n2", "output": "42", "public": False},
    {"input": "7\n8", "output": "15", "public": False}]})
# the seed's verl form: an assert snippet, which used to run inside the model's own program
ASSERT_CODE = Task("assert", CODE_STATEMENT, tests={"kind": "assert", "func_name": "add", "snippets": [
    "result = Solution().add(40, 2)\nassert result == 42, f'Expected 42, but got {repr(result)}'"]})
STDIN_CODE = Task("stdin", "Print the sum of two numbers.\n\nSample Input 1\n\n1 2\n\nSample Output 1\n\n3\n", tests={
    "kind": "stdin", "cases": [{"input": "1 2\n", "output": "3\n", "public": True},
                               {"input": "40 2\n", "output": "42\n", "public": False}]})


@dataclass(frozen=True)
class TermFixture:
    """A term, how to build it, what it scores and the most a degenerate policy may earn."""

    options: dict[str, Any]
    task: Task
    family: str
    tools: tuple[str, ...] = ("wiki_search",)
    ceiling: float = 0.0
    why: str = "a correctness term: a degenerate policy earns nothing"
    extra: dict[str, Any] = field(default_factory=dict)


FIXTURES: dict[str, TermFixture] = {
    "em_f1": TermFixture({"name": "em_f1"}, QA, "synthhop"),
    "em_f1/empty-alias": TermFixture({"name": "em_f1"}, QA_EMPTY_ALIAS, "mhqa"),
    "em_f1/f1": TermFixture({"name": "em_f1", "metric": "f1"}, QA_ONE, "synthhop"),
    "em_f1/f1-long-gold": TermFixture({"name": "em_f1", "metric": "f1"}, QA, "synthhop", ceiling=0.2 + 1e-9,
                                      why="partial credit by design: within the length cap, shared words (even "
                                          "'of') count; copies and lists earn 0. A metric: train RL on EM"),
    "subem": TermFixture({"name": "subem"}, QA, "synthhop"),
    "subem/empty-alias": TermFixture({"name": "subem"}, QA_EMPTY_ALIAS, "mhqa"),
    "subem/number": TermFixture({"name": "subem"}, QA_NUMBER, "synthhop"),  # '0123456789' holds every digit
    "multi_em": TermFixture({"name": "multi_em"}, QA, "mhqa"),
    "gaia": TermFixture({"name": "gaia"}, QA, "web", tools=("web_search", "crawl_page")),
    "llm_judge": TermFixture({"name": "llm_judge", "backoff_s": 0.0, "max_retries": 0}, QA, "web",
                             tools=("web_search", "crawl_page")),
    "math_verify": TermFixture({"name": "math_verify"}, MATH, "math", tools=("code",)),
    "code_tests": TermFixture({"name": "code_tests", "cpu_s": 2, "wall_s": 4}, CODE, "code", tools=("code",)),
    "code_tests/assert": TermFixture({"name": "code_tests", "cpu_s": 2, "wall_s": 4}, ASSERT_CODE, "code",
                                     tools=("code",)),
    "code_tests/stdin": TermFixture({"name": "code_tests", "cpu_s": 2, "wall_s": 4}, STDIN_CODE, "code",
                                    tools=("code",)),
    "format": TermFixture({"name": "format"}, QA, "synthhop", ceiling=1.0,
                          why="shaping: pays for well-formed CoA text, whatever the answer (weight it below EM)"),
    "tool_use": TermFixture({"name": "tool_use"}, QA, "synthhop", ceiling=1.0,
                            why="shaping: pays for calling tools without repeats, whatever the answer"),
    # group terms score beside a primary (correctness) term; the group term's own score is checked
    "group_length": TermFixture({"terms": [{"name": "em_f1"}, {"name": "group_length"}]}, QA, "synthhop",
                                why="a wrong answer earns min(0, lambda): never more than 0"),
    "overlong": TermFixture({"terms": [{"name": "em_f1"}, {"name": "overlong", "max_length": 64, "buffer": 16}]},
                            QA, "synthhop", why="a penalty: 0 at best"),
}
JUDGES = ("grader", "parrot", "copycat", "gullible", "swayed", "echo-rules")


def test_every_term_has_a_hacking_fixture():
    covered = {_term(fixture) for fixture in FIXTURES.values()}
    missing = sorted(set(available_rewards()) - covered)
    assert not missing, f"reward terms without a degenerate-policy fixture in {__file__}: {missing}"


def _episode(policy: DegeneratePolicy, fixture: TermFixture) -> EpisodeView:
    """Play ``policy`` with the fixture's page as every tool's observation."""
    script = policy.play(Context(fixture.task.question, fixture.family, fixture.tools))
    action, segments, calls, answer = next(script), [], [], ""
    for _ in range(10):
        segments.append(("generated", action))
        parsed = parse_turn(action)
        if parsed.answer is not None or not parsed.tool_calls:  # an answer (or an empty one the env refuses)
            answer = parsed.answer or ""
            break
        calls.extend(ToolCallRecord(c.tool, c.query) for c in parsed.tool_calls)
        observation = render_observation(PAGE)
        segments.append(("observation", observation))
        action = script.send(observation)
    tokens = sum(len(text.split()) for _, text in segments)
    return EpisodeView(fixture.task, answer, tuple(segments), tuple(calls), response_tokens=tokens)


def _term(fixture: TermFixture) -> str:
    """The term whose score is checked: the only one, or the group term beside the primary."""
    return fixture.options["terms"][-1]["name"] if "terms" in fixture.options else fixture.options["name"]


def _scores(fixture: TermFixture, policy: DegeneratePolicy, options: dict[str, Any]) -> tuple[float | None, dict]:
    """The term's score for the policy's episode (None: no verdict, the reward failed)."""
    reward = build_reward({**fixture.options, **options})
    try:
        view = _episode(policy, fixture)
        result = reward.score_episode(view)
        if primary_failed(result.details):
            return None, result.details
        if reward.group_terms:  # a group of two such episodes, scored by the group term
            primary = float(result.details["terms"][reward.primary]["score"])
            scored = EpisodeView(view.task, view.answer, view.segments, view.tool_calls, view.response_tokens,
                                 primary_score=primary, reward=result.score)
            result = reward.score_group([scored, scored], [result.details, result.details])[0]
        return float(result.details["terms"][_term(fixture)]["score"]), result.details
    finally:
        reward.close()


def _cases() -> list[Any]:
    cases = []
    for label, fixture in FIXTURES.items():
        context = Context(fixture.task.question, fixture.family, fixture.tools)
        for policy in POLICIES:
            if policy.applies_to(context) and policy.kind != "public_examples":
                cases.append(pytest.param(label, policy, id=f"{label}-{policy.name}"))
    return cases


@pytest.fixture(scope="module")
def judge():
    with judge_server() as server:
        yield server


@pytest.mark.parametrize(("label", "policy"), _cases())
def test_degenerate_policies_earn_no_more_than_the_terms_ceiling(label, policy, judge):
    fixture = FIXTURES[label]
    if _term(fixture) == "llm_judge":  # every judge, honest or fooled, gives no reward
        for model in JUDGES:
            score, details = _scores(fixture, policy, {"base_url": judge.base_url, "model": model})
            assert score in (None, 0.0), (model, details.get("raw_reply"), details)
        return
    score, details = _scores(fixture, policy, {})
    assert score is not None, f"{label}: the reward failed on a degenerate answer: {details}"
    assert score <= fixture.ceiling, f"{label} paid {score} to {policy.name} ({fixture.why}): {details}"
