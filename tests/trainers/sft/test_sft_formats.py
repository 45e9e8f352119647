"""Reading SFT data: our trajectories and the seed's ShareGPT/messages/alpaca exports."""

from __future__ import annotations

import json

import pytest

from agents.trajectory import Trajectory
from trainers.data import DataFormatError, FormatErrorKind, load_samples, split_observations

COA_TURN = (
    "<think>\nFind the founder.\n</think>\n<wiki_search>Bafurk Foundry</wiki_search>"
    "\n<observation>\nDoc 1: founded by Perrin Kaedoul.\n</observation>\n\n"
    "<answer>Perrin Kaedoul</answer>"
)


def _write(path, rows, as_array=False):
    text = json.dumps(rows) if as_array else "\n".join(json.dumps(r) for r in rows)
    path.write_text(text, encoding="utf-8")
    return path


def test_observation_spans_are_split_off_by_text_including_env_whitespace():
    spans = split_observations(COA_TURN)
    assert [s.trainable for s in spans] == [True, False, True]
    assert spans[1].text == "\n<observation>\nDoc 1: founded by Perrin Kaedoul.\n</observation>\n\n"
    assert "".join(s.text for s in spans) == COA_TURN


def test_unclosed_observation_runs_to_the_end_and_is_not_trained():
    spans = split_observations("<code>print(1)</code>\n<observation>\n1\n")
    assert [s.trainable for s in spans] == [True, False]


def test_sharegpt_json_array_as_the_seed_released_it(tmp_path):
    rows = [{"conversations": [{"from": "system", "value": "You are an agent."},
                               {"from": "human", "value": "Who founded Bafurk Foundry?"},
                               {"from": "gpt", "value": COA_TURN}]}]
    (sample,) = load_samples(_write(tmp_path / "sft.json", rows, as_array=True))
    assert [m.role for m in sample.messages] == ["system", "user", "assistant"]
    assert [s.trainable for s in sample.messages[-1].spans] == [True, False, True]


def test_messages_and_alpaca_formats(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": COA_TURN}]},
            {"instruction": "q2", "input": "ctx", "output": COA_TURN, "system": "sys"}]
    first, second = load_samples(_write(tmp_path / "mixed.jsonl", rows))
    assert first.messages[-1].spans[1].trainable is False
    assert [m.role for m in second.messages] == ["system", "user", "assistant"]
    assert second.messages[1].content == "q2\nctx"


def test_trajectory_jsonl_keeps_segments_and_exact_ids(tmp_path):
    text_only = Trajectory("coa/X-v0", "t1", prompt_messages=[{"role": "user", "content": "q"}])
    text_only.add_generated("<wiki_search>a</wiki_search>")
    text_only.add_observation("\n<observation>\nb\n</observation>\n\n")
    sampled = Trajectory("coa/X-v0", "t2", prompt_ids=[1, 2])
    sampled.add_generated("x", token_ids=[5, 6])
    sampled.add_observation("y", token_ids=[7])
    path = tmp_path / "traj.jsonl"
    path.write_text(text_only.to_json() + "\n" + sampled.to_json() + "\n", encoding="utf-8")
    a, b = load_samples(path)
    assert not a.has_token_ids and [s.trainable for s in a.messages[-1].spans] == [True, False]
    assert b.prompt_ids == (1, 2) and b.messages[-1].spans[0].token_ids == (5, 6)


@pytest.mark.parametrize(("row", "kind"), [
    ({"foo": 1}, FormatErrorKind.UNKNOWN_FORMAT),
    ({"conversations": [{"from": "wizard", "value": "x"}]}, FormatErrorKind.UNKNOWN_ROLE),
    ({"conversations": [{"from": "human", "value": "x"}]}, FormatErrorKind.NO_ASSISTANT),
    ({"messages": [{"role": "user"}]}, FormatErrorKind.MISSING_FIELD),
])
def test_bad_rows_fail_with_a_kind_and_the_row(tmp_path, row, kind):
    path = _write(tmp_path / "bad.jsonl", [row])
    with pytest.raises(DataFormatError) as info:
        load_samples(path)
    assert info.value.kind is kind and info.value.where.endswith("bad.jsonl:1")


def test_sharegpt_parquet_and_a_directory_of_mixed_files(tmp_path):
    """The hub serves JSON uploads as parquet too; a directory may hold both."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"conversations": [{"from": "human", "value": "Who founded Bafurk Foundry?"},
                               {"from": "gpt", "value": COA_TURN}], "system": "You are an agent."}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train-00000.parquet")
    _write(tmp_path / "extra.jsonl", rows)
    (tmp_path / "README.md").write_text("not data", encoding="utf-8")
    samples = load_samples(tmp_path)
    assert len(samples) == 2
    for sample in samples:
        assert [m.role for m in sample.messages] == ["system", "user", "assistant"]
        assert [s.trainable for s in sample.messages[-1].spans] == [True, False, True]


def test_a_coa_eval_output_directory_is_training_data(tmp_path):
    """``coa eval --out DIR`` writes trajectories.jsonl, summary.json and plots/: the
    trajectories are read (rewards kept for ``min_reward``), the summary is not data."""
    good = Trajectory("coa/X-v0", "t1", prompt_messages=[{"role": "user", "content": "q"}], reward=1.0)
    good.add_generated("<answer>a</answer>")
    bad = Trajectory("coa/X-v0", "t2", prompt_messages=[{"role": "user", "content": "q"}], reward=0.0)
    bad.add_generated("<answer>b</answer>")
    (tmp_path / "trajectories.jsonl").write_text(good.to_json() + "\n" + bad.to_json() + "\n",
                                                 encoding="utf-8")
    (tmp_path / "summary.json").write_text(json.dumps({"episodes": 2, "accuracy": 0.5}, indent=2),
                                           encoding="utf-8")
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "tool_usage.png").write_bytes(b"\x89PNG")
    samples = load_samples(tmp_path)
    assert sorted(s.meta["reward"] for s in samples) == [0.0, 1.0]


def test_one_pretty_printed_record_is_a_sample(tmp_path):
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": COA_TURN}]}
    path = tmp_path / "one.json"
    path.write_text(json.dumps(row, indent=2), encoding="utf-8")
    (sample,) = load_samples(path)
    assert sample.messages[-1].spans[1].trainable is False
