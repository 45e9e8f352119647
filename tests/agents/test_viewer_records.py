"""The trajectory viewer's reading of runs, without a server: the span split of any text, records
of any shape (unknown fields, old and structured statuses, lines that are not trajectories, each
saying why) and the file index over a run that is still being written or is replaced.

The viewer's API, pages and export over real runs are tests/agents/test_viewer_server.py.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.trajectory import Trajectory
from agents.viewer.index import FileIndex, Vocabs
from agents.viewer.records import UnreadableRecord, parse_record
from agents.viewer.spans import join_spans, split_spans

_FRAGMENTS = st.sampled_from(["<think>", "</think>", "<code>", "</code>", "<answer>", "</answer>", "<observation>",
                              "</observation>", "<plan>", "</plan>", "<br>", "</b>", "<", ">", "\n", "x", "é 1"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=30).map("".join))
def test_spans_keep_every_character_of_any_text(text):
    assert join_spans(split_spans(text)) == text


def test_spans_follow_the_protocol_tags_and_flag_what_is_malformed():
    spans = split_spans("<plan>p</plan>\n<think>a <b>bold</b></think><code>x = '<answer>'</code></x>"
                        "<suggested_answer>4</suggested_answer><answer>4")
    assert [(s["kind"], s["tag"], s["closed"]) for s in spans] == [
        ("role", "plan", True), ("text", "", True), ("role", "think", True), ("tool", "code", True),
        ("text", "", True), ("role", "suggested_answer", True), ("answer", "answer", False)]
    assert spans[2]["text"] == "a <b>bold</b>"  # unknown markup stays text inside its span
    assert spans[3]["text"] == "x = '<answer>'"
    assert spans[4]["text"] == "</x>"


def test_records_keep_unknown_fields_and_read_any_status_shape():
    line = Trajectory("coa/X-v0", "t1").to_dict()
    line.update(status={"kind": "error", "detail": "timeout"}, judge={"score": 3})
    line["segments"] = [{"kind": "generated", "text": "<answer>1</answer>", "role": "assistant"}]
    record = parse_record(json.dumps(line))
    assert record.status == "error:timeout"
    assert record.unknown == {"judge": {"score": 3}, "segments[0].role": "assistant"}
    assert parse_record(json.dumps({**line, "status": "truncated"})).status == "truncated"


def test_a_status_outside_the_dataclass_vocabulary_still_displays(monkeypatch):
    """Old files (``error:timeout``) read by a Trajectory with a typed status, or the reverse."""
    strict = Trajectory.from_dict.__func__

    def typed(cls, data):
        if data.get("status", "ok") not in ("ok", "truncated", "error"):
            raise ValueError(f"{data['status']!r} is not a valid EpisodeStatus")
        return strict(cls, data)

    monkeypatch.setattr(Trajectory, "from_dict", classmethod(typed))
    record = parse_record(json.dumps({**Trajectory("coa/X-v0", "t1").to_dict(), "status": "error:timeout"}))
    assert record.status == "error:timeout" and record.trajectory.task_id == "t1"


@pytest.mark.parametrize(("line", "message"), [
    ('{"env_id": "coa/X-v0", "task_id": "t", "segm', "not valid JSON"),
    ("[1, 2]", "not a trajectory object"),
    ('{"task_id": "t"}', "no env_id"),
    ('{"env_id": "e", "task_id": "t", "reward": "high"}', "reward is 'high'"),
    ('{"env_id": "e", "task_id": "t", "segments": [{"text": 3}]}', "segments[0].text is int"),
    ('{"env_id": "e", "task_id": "t", "prompt_ids": ["a"]}', "prompt_ids is not a list of token ids"),
])
def test_lines_that_are_not_trajectories_say_why(line, message):
    with pytest.raises(UnreadableRecord, match=re.escape(message)):
        parse_record(line)


def test_index_follows_a_growing_file_a_torn_tail_and_a_replaced_file(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    lines = [Trajectory("coa/X-v0", f"t{i}", reward=float(i)).to_json() for i in range(5)]
    path.write_text("\n".join(lines[:2]) + "\n")
    index = FileIndex(path, Vocabs.new())
    index.refresh()
    assert len(index) == 2 and index.torn_tail is None

    with open(path, "a") as handle:  # a writer mid-line: the tail is not a row yet
        handle.write(lines[2] + "\n" + lines[3][:40])
    index.refresh()
    assert len(index) == 3 and index.torn_tail is not None and index.torn_tail.line == 4
    with open(path, "a") as handle:
        handle.write(lines[3][40:] + "\n")
    index.refresh()
    assert len(index) == 4 and index.torn_tail is None
    assert index.record(3).trajectory.task_id == "t3"

    replacement = tmp_path / "sorted.jsonl"  # what coa eval does at the end: rewrite and rename
    replacement.write_text(lines[4] + "\n" + lines[0] + "\n")
    os.replace(replacement, path)
    index.refresh()
    assert len(index) == 2 and index.generation == 1
    assert [index.record(i).trajectory.task_id for i in range(2)] == ["t4", "t0"]
