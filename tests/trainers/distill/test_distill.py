"""Distillation keeps exactly the teacher episodes the reward accepts, in a form SFT reads."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agents.trajectory import Trajectory, read_trajectories, write_trajectory
from coa_cli.main import app
from trainers.data import load_samples
from trainers.distill import DistillConfig, distill
from trainers.distill.filters import correctness_reason

# Synthetic records: the stages that need the env (leakage, replay) are tested on real episodes below.
OFFLINE = {"leak_check": False, "replay": False, "min_roles": 0}


def _episode(task: str, turns: list[str], reward: float = 1.0, status: str = "ok", **fields) -> Trajectory:
    trajectory = Trajectory(env_id="coa/SynthHop-v0", task_id=task, prompt_text="Q?", reward=reward,
                            terminated=status == "ok", status=status, **fields)
    for index, text in enumerate(turns):
        trajectory.add_generated(text)
        if index < len(turns) - 1:
            trajectory.add_observation(f"\n<observation>\nresult {index}\n</observation>\n\n")
    return trajectory


def _write(path, episodes) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for episode in episodes:
            write_trajectory(handle, episode)


SEARCH, ANSWER = "<wiki_search>who</wiki_search>", "<answer>Ada</answer>"


def test_each_reason_to_drop_is_applied_and_counted(tmp_path):
    run = tmp_path / "teacher.jsonl"
    _write(run, [
        _episode("t1", [SEARCH, SEARCH, ANSWER]),                   # accepted, longer
        _episode("t1", [SEARCH, ANSWER]),                           # accepted, shortest: kept
        _episode("t1", [SEARCH, ANSWER]),                           # same text again
        _episode("t2", [SEARCH, "<answer>Bob</answer>"], reward=0.0),
        _episode("t3", [SEARCH], reward=0.0, status="truncated:max_turns"),
        _episode("t4", ["<code>x", ANSWER], tool_errors={"action": 1}),
        _episode("t5", [SEARCH, ANSWER], tool_errors={"wiki_search": 1}),  # a tool error is fine
        _episode("t6", []),
    ])
    out = tmp_path / "sft.jsonl"
    report = distill([run], out, **OFFLINE)
    kept = list(read_trajectories(out))
    assert [(t.task_id, t.num_turns) for t in kept] == [("t1", 2), ("t5", 2)]
    assert report.dropped == {"bad_action": 1, "below_reward": 1, "duplicate": 1, "no_generation": 1,
                              "not_finished": 1, "over_task_cap": 1}
    assert report.survival() == [("read", 8), ("convert", 8), ("correct", 5), ("format", 4), ("leakage", 4),
                                 ("dedup", 3), ("limits", 3), ("diversity", 3), ("replay", 3), ("select", 2)]
    assert (report.read, report.kept, report.tasks_seen, report.tasks_kept) == (8, 2, 6, 2)
    saved = json.loads((tmp_path / "sft.jsonl.report.json").read_text())
    assert saved["kept"] == 2 and saved["acceptance_rate"] == 0.25
    assert [stage["stage"] for stage in saved["stages"]][-1] == "select"


def test_caps_preferences_and_options(tmp_path):
    run = tmp_path / "teacher.jsonl"
    _write(run, [_episode("t1", [SEARCH] * n + [ANSWER]) for n in (3, 1, 2)])
    first = distill([run], tmp_path / "first.jsonl", prefer="first", **OFFLINE)
    assert [t.num_turns for t in read_trajectories(tmp_path / "first.jsonl")] == [4]
    everything = distill([run], tmp_path / "all.jsonl", max_per_task=0, **OFFLINE)
    assert [t.num_turns for t in read_trajectories(tmp_path / "all.jsonl")] == [2, 3, 4]
    assert first.kept == 1 and everything.kept == 3
    partial = _episode("t9", [SEARCH, ANSWER], reward=0.5)
    assert correctness_reason(partial, min_reward=1.0) == "below_reward"
    assert correctness_reason(partial, min_reward=0.5) is None
    with pytest.raises(ValueError, match="prefer"):
        distill([run], tmp_path / "x.jsonl", prefer="longest")
    with pytest.raises(ValueError, match="budget"):
        DistillConfig(budget=-1)
    with pytest.raises(FileNotFoundError, match="coa eval"):
        distill([tmp_path], tmp_path / "x.jsonl")


def test_teacher_runs_through_coa_eval_become_sft_samples(tmp_path):
    """Oracle and a wrong teacher play SynthHop through `coa eval`; `coa distill` keeps the
    oracle's episodes only, and the SFT loader reads them with observations split off."""
    runner = CliRunner()
    common = ["--n", "4", "--concurrency", "2"]
    good = runner.invoke(app, ["eval", "coa/SynthHop-v0", "--agent", "oracle", "-k", "2", *common,
                               "--out", str(tmp_path / "oracle"), "--no-progress", "--no-plots"])
    assert good.exit_code == 0, good.output
    bad = runner.invoke(app, ["eval", "coa/SynthHop-v0", "--agent", "agents.baselines:retrieval_baseline", *common,
                              "--out", str(tmp_path / "baseline"), "--no-progress", "--no-plots"])
    assert bad.exit_code == 0, bad.output
    out = tmp_path / "data" / "sft.jsonl"
    result = runner.invoke(app, ["distill", str(tmp_path / "oracle"), str(tmp_path / "baseline"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "kept 4 of 12 episodes (4 of 4 tasks)" in result.output
    kept = list(read_trajectories(out))
    assert all(t.reward == 1.0 for t in kept)
    samples = load_samples(out.parent)  # the report beside the data is skipped as metadata
    assert len(samples) == 4
    for sample, trajectory in zip(samples, kept, strict=True):
        spans = [span for message in sample.messages if message.role == "assistant" for span in message.spans]
        generated = "".join(span.text for span in spans if span.trainable)
        assert generated == "".join(s.text for s in trajectory.segments if s.trainable)
        assert "<observation>" not in generated
    missing = runner.invoke(app, ["distill", str(tmp_path / "nothing"), "--out", str(out)])
    assert missing.exit_code != 0 and "not found" in missing.output


def test_teacher_token_ids_are_dropped_unless_the_student_shares_the_tokenizer(tmp_path):
    episode = _episode("t1", [SEARCH, ANSWER])
    episode.prompt_ids = [1, 2, 3]
    for number, segment in enumerate(episode.segments):
        segment.token_ids = [10 + number]
        if segment.kind == "generated":
            segment.logprobs = [-0.5]
    run = tmp_path / "teacher.jsonl"
    _write(run, [episode])
    distill([run], tmp_path / "text.jsonl", **OFFLINE)
    (text_only,) = read_trajectories(tmp_path / "text.jsonl")
    assert not text_only.prompt_ids and not any(s.token_ids or s.logprobs for s in text_only.segments)
    assert not load_samples(tmp_path / "text.jsonl")[0].has_token_ids  # the student re-tokenises
    distill([run], tmp_path / "ids.jsonl", keep_token_ids=True, **OFFLINE)
    (with_ids,) = read_trajectories(tmp_path / "ids.jsonl")
    assert with_ids.prompt_ids == [1, 2, 3] and with_ids.response_ids() == [10, 11, 12]
