"""A teacher run's agent log becomes role spans of one CoA trajectory, observations untouched."""

from __future__ import annotations

import pytest

from agents.trajectory import Trajectory
from coa_envs.protocol import parse_turn
from trainers.distill import ConversionError, clean_role_span, convert, is_teacher_run

OBS = "\n<observation>\nDoc 1 (Title: Ada)\nAda was born in Lotre.\n</observation>\n\n"


def _event(turn, agent, kind, text, **detail):
    return {"turn": turn, "agent": agent, "kind": kind, "text": text, "detail": detail}


def _run(events, actions=("<wiki_search>Ada born</wiki_search>", "<answer>Lotre</answer>")) -> Trajectory:
    trajectory = Trajectory(env_id="coa/SynthHop-v0", task_id="t1", prompt_text="Q?", reward=1.0, terminated=True)
    for index, action in enumerate(actions):
        trajectory.add_generated(action)
        if index < len(actions) - 1:
            trajectory.add_observation(OBS)
    trajectory.info["teacher"] = {"system": "s", "events": events, "rejections": 1}
    return trajectory


EVENTS = [
    _event(0, "manager", "plan", "Find where Ada was born."),
    _event(0, "manager", "think", "Ask the wiki agent."),
    _event(0, "manager", "think", "Ask the wiki agent."),  # said twice in a row: once is enough
    _event(0, "wiki_agent", "tool", "Ada born", tool="wiki_search"),
    _event(1, "wiki_agent", "think", "Ada was born in Lotre."),
    _event(1, "reflector", "reflection", "The step is answered."),
    _event(1, "manager", "suggested_answer", "Ada"),
    _event(1, "verifier", "double_check", "Wrong entity.\nVERDICT: REJECT", verdict="reject"),
    _event(1, "manager", "think", "I will write <answer> soon"),  # a CoA tag inside: not a clean span
    _event(1, "manager", "suggested_answer", "Lotre"),
    _event(1, "verifier", "double_check", "Supported.\nVERDICT: ACCEPT", verdict="accept"),
    _event(1, "manager", "answer", "Lotre"),
    _event(2, "reflector", "reflection", "Written after the episode ended."),
]


def test_role_spans_go_into_the_actions_in_order_and_observations_stay_exact():
    raw = _run(EVENTS)
    coa = convert(raw)
    turns = [parse_turn(s.text) for s in coa.segments if s.kind == "generated"]
    assert all(turn.ok for turn in turns)
    assert [r.tag for r in turns[0].roles] == ["plan", "think"] and turns[0].tool_calls[0].query == "Ada born"
    assert [(r.tag, r.text) for r in turns[1].roles] == [
        ("think", "Ada was born in Lotre."), ("reflection", "The step is answered."), ("suggested_answer", "Ada"),
        ("double_check", "Wrong entity.\nVERDICT: REJECT"), ("suggested_answer", "Lotre"),
        ("double_check", "Supported.\nVERDICT: ACCEPT")]
    assert turns[1].answer == "Lotre"
    assert coa.segments[0].text.endswith("\n<wiki_search>Ada born</wiki_search>")
    assert [s.text for s in coa.segments if s.kind == "observation"] == [OBS]
    assert coa.info["conversion"] == {"role_spans": {"plan": 1, "think": 2, "reflection": 1, "suggested_answer": 2,
                                                     "double_check": 2},
                                      "dropped_spans": 1, "unattached_spans": 1}
    assert "events" not in coa.info["teacher"] and coa.info["teacher"]["rejections"] == 1
    assert is_teacher_run(raw) and not is_teacher_run(coa)
    assert convert(coa) is coa  # converting twice changes nothing
    assert raw.segments[0].text == "<wiki_search>Ada born</wiki_search>"  # the input is not modified


def test_a_log_that_does_not_fit_the_actions_is_refused():
    wrong_query = [_event(0, "wiki_agent", "tool", "Bob born", tool="wiki_search"), *EVENTS[4:]]
    with pytest.raises(ConversionError, match="turn 0"):
        convert(_run(wrong_query))
    beyond = [*EVENTS, _event(5, "manager", "answer", "Lotre")]
    with pytest.raises(ConversionError, match="turn 5"):
        convert(_run(beyond))


def test_plain_runs_pass_through_and_role_span_checks():
    plain = _run([])
    plain.info.pop("teacher")
    assert convert(plain) is plain
    assert clean_role_span("think", "  x < y and a <b> tag  ").text == "x < y and a <b> tag"
    assert clean_role_span("think", "use <code> here") is None
    assert clean_role_span("think", "   ") is None
    assert clean_role_span("answer", "Lotre") is None  # not a role


def test_distill_counts_a_run_it_cannot_convert_and_goes_on(tmp_path):
    from agents.trajectory import write_trajectory
    from trainers.distill import distill

    broken = _run([_event(0, "wiki_agent", "tool", "Bob born", tool="wiki_search"), *EVENTS[4:]])
    run = tmp_path / "runs.jsonl"
    with open(run, "w", encoding="utf-8") as handle:
        write_trajectory(handle, broken)
        write_trajectory(handle, _run(EVENTS))
    report = distill([run], tmp_path / "out.jsonl", leak_check=False, replay=False)
    assert report.stages[0] == {"stage": "convert", "in": 2, "out": 1, "dropped": {"convert_error": 1}}
    assert report.kept == 1 and "turn 0" in report.errors[0]
