"""coa pairs: ranking by reward then length, what is left out, and the bad-input errors."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from agents.trajectory import Trajectory
from coa_cli.main import app
from trainers.dpo.pairs import (
    PairOptions,
    PairsError,
    build_pairs,
    read_pairs,
    read_run,
    write_pairs,
)


def _cli(*args: str):
    """Run ``coa ...``; ``.text`` is the output with rich's panel borders and wrapping undone."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    result.text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    return result


def _trajectory(task: str, sample: int, reward: float, answer_text: str,
                status: str = "ok") -> Trajectory:
    t = Trajectory(env_id="coa/SynthHop-v0", task_id=task, prompt_text="q", reward=reward,
                   sample_index=sample, status=status)
    t.add_generated("<wiki_search>x</wiki_search>")
    t.add_observation("\n<observation>\nsome long retrieved passage\n</observation>\n\n")
    t.add_generated(answer_text)
    return t


def test_pairs_rank_by_reward_then_length():
    samples = [
        _trajectory("a", 0, 0.0, "<answer>wrong</answer>"),
        _trajectory("a", 1, 1.0, "<think>long reasoning first</think><answer>right</answer>"),
        _trajectory("a", 2, 1.0, "<answer>right</answer>"),
        _trajectory("a", 3, 0.0, "<think>a much longer wrong guess</think><answer>no</answer>"),
    ]
    pairs, report = build_pairs(samples, PairOptions(pairs_per_task=2))
    # best: reward 1 and shortest (2), then 1; worst: reward 0 and longest (3), then 0
    assert [(p.chosen.sample_index, p.rejected.sample_index) for p in pairs] == [(2, 3), (1, 0)]
    assert pairs[0].pair_id == "coa/SynthHop-v0/a/2>3"
    assert report.pairs == 2 and report.tasks == 1

    one, _ = build_pairs(samples)  # default: one pair per task, the widest contrast
    assert [(p.chosen.sample_index, p.rejected.sample_index) for p in one] == [(2, 3)]


def test_equal_rewards_errors_and_single_samples_make_no_pair():
    samples = [
        _trajectory("same", 0, 1.0, "<answer>a</answer>"),
        _trajectory("same", 1, 1.0, "<answer>a much longer answer</answer>"),
        _trajectory("lonely", 0, 1.0, "<answer>a</answer>"),
        _trajectory("err", 0, 1.0, "<answer>a</answer>"),
        _trajectory("err", 1, 0.0, "", status="error:engine_timeout"),
    ]
    pairs, report = build_pairs(samples)
    assert pairs == []
    assert report.tasks_equal_rewards == 1  # length alone never makes a pair
    assert report.tasks_single_sample == 2  # "lonely", and "err" once its error is left out
    assert report.skipped_errors == 1


def test_min_margin_and_partial_rewards():
    samples = [_trajectory("t", k, r, f"<answer>{k}</answer>")
               for k, r in enumerate([0.5, 0.4, 0.9, 0.0])]
    pairs, _ = build_pairs(samples, PairOptions(pairs_per_task=2, min_margin=0.3))
    assert [(p.chosen.reward, p.rejected.reward) for p in pairs] == [(0.9, 0.0)]  # 0.5-0.4 < 0.3


def test_pairs_keep_the_coa_mask_and_round_trip(tmp_path, noisy_run):
    trajectories, _, report = read_run(noisy_run)
    assert len(trajectories) == 64 and not report.torn_last_line
    pairs, report = build_pairs(trajectories)
    path = write_pairs(tmp_path / "pairs.jsonl", pairs)
    again = read_pairs(path)
    assert [p.to_dict() for p in again] == [p.to_dict() for p in pairs]
    for pair in again:
        assert pair.chosen.reward > pair.rejected.reward
        assert pair.chosen.task_id == pair.rejected.task_id
        kinds = [s.kind for s in pair.chosen.segments]
        assert "observation" in kinds and kinds[-1] == "generated"


def test_cli_writes_pairs_and_prints_the_report(tmp_path, noisy_run):
    out = tmp_path / "p.jsonl"
    result = _cli("pairs", str(noisy_run), "--out", str(out))
    assert result.exit_code == 0, result.text
    lines = out.read_text().splitlines()
    assert f"wrote {len(lines)} pairs" in result.text
    assert "tasks without a reward gap" in result.text
    first = json.loads(lines[0])
    assert {"pair_id", "chosen", "rejected", "reward_chosen", "reward_rejected"} <= set(first)


def test_cli_refuses_a_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    result = _cli("pairs", str(tmp_path), "--out", str(tmp_path / "p.jsonl"))
    assert result.exit_code != 0
    assert "is not a run directory" in result.text and "trajectories.jsonl" in result.text
    missing = _cli("pairs", str(tmp_path / "nope"), "--out", "p.jsonl")
    assert missing.exit_code != 0 and "does not exist" in missing.text


def test_cli_refuses_a_run_without_pairs(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectories.jsonl").write_text(_trajectory("a", 0, 1.0, "<answer>a</answer>")
                                            .to_json() + "\n")
    result = _cli("pairs", str(run), "--out", str(tmp_path / "p.jsonl"))
    assert result.exit_code != 0 and "no pairs" in result.text and "-k K" in result.text


def test_a_line_cut_in_the_middle_is_an_error_naming_file_and_line(tmp_path, noisy_run):
    lines = (noisy_run / "trajectories.jsonl").read_text().splitlines()
    run = tmp_path / "run"
    run.mkdir()
    lines[5] = lines[5][:40]
    (run / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(PairsError, match=r"trajectories.jsonl:6: not a JSON trajectory line"):
        read_run(run)
    result = _cli("pairs", str(run), "--out", str(tmp_path / "p.jsonl"))
    assert result.exit_code != 0 and "trajectories.jsonl:6" in result.text


def test_a_torn_last_line_is_skipped_and_reported(tmp_path, noisy_run):
    text = (noisy_run / "trajectories.jsonl").read_text()
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectories.jsonl").write_text(text.rstrip("\n")[:-30])  # a writer killed mid-line
    trajectories, _, report = read_run(run)
    assert len(trajectories) == 63 and report.torn_last_line
    result = _cli("pairs", str(run), "--out", str(tmp_path / "p.jsonl"))
    assert result.exit_code == 0 and "cut short" in result.text


def test_read_pairs_refuses_damaged_files(tmp_path, text_pairs):
    lines = text_pairs.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join([lines[0], lines[1][:50], *lines[2:]]) + "\n")
    with pytest.raises(PairsError, match=r"cut.jsonl:2: not a complete JSON line"):
        read_pairs(cut)
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join([lines[0], lines[0]]) + "\n")
    with pytest.raises(PairsError, match="appears twice"):
        read_pairs(dup)
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"pair_id": "x", "chosen": {}}) + "\n")
    with pytest.raises(PairsError, match=r"wrong\.jsonl:1: not a preference pair"):
        read_pairs(wrong)
    with pytest.raises(PairsError, match="coa pairs RUN_DIR"):
        read_pairs(tmp_path / "missing.jsonl")
