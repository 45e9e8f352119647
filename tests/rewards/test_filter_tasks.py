"""``coa filter-tasks``: pass rates per task, the bands, the kept list and its use as a task list."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from typer.testing import CliRunner

from coa_cli.filter_tasks import band_of
from coa_cli.main import app
from tests.rewards import banded_agent

runner = CliRunner()


def _filter(tmp_path, *args):
    banded_agent.reset_counts()
    out = tmp_path / "tasks.jsonl"
    result = runner.invoke(app, ["filter-tasks", "coa/SynthHop-v0", "--agent", "tests.rewards.banded_agent:Banded",
                                 "--out", str(out), "--concurrency", "2", "--no-progress", *args])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_bands_kept_tasks_and_report(tmp_path):
    out, output = _filter(tmp_path, "-k", "4", "--n", "10", "--keep", "0.3-0.8")
    report = json.loads(out.with_suffix(".report.json").read_text())
    # quotas 0,1,2,3,4,0,1,2,3,4 of 4 -> rates 0, .25, .5, .75, 1 twice each
    assert report["bands"] == {"never solved": 2, "below band": 2, "kept": 4, "above band": 0,
                               "always solved": 2, "unscored": 0}
    assert report["solved_histogram"] == {"0": 2, "1": 2, "2": 2, "3": 2, "4": 2}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["solved"], r["samples"], r["pass_rate"]) for r in rows] == [(2, 4, 0.5), (3, 4, 0.75)] * 2
    assert "kept 4 of 10 tasks" in output and "never solved" in output
    assert len(out.with_suffix(".trajectories.jsonl").read_text().splitlines()) == 40

    # The kept list is a task list any env (and the RL config) takes.
    env = gym.make("coa/SynthHop-v0", task_options={"split": "train", "task_list": str(out)})
    assert [t.task_id for t in env.unwrapped.tasks] == [r["task_id"] for r in rows]
    env.close()
    with pytest.raises(ValueError, match="not among this env's"):  # the list was made on the training split
        gym.make("coa/SynthHop-v0", task_options={"split": "test", "task_list": str(out)})


def test_skip_starts_after_the_tasks_a_teacher_played(tmp_path):
    out, _ = _filter(tmp_path, "-k", "4", "--skip", "3", "--n", "4", "--keep", "0.3-0.8")
    report = json.loads(out.with_suffix(".report.json").read_text())
    env = gym.make("coa/SynthHop-v0", task_options={"split": "train"})
    ids = [t.task_id for t in env.unwrapped.tasks]
    env.close()
    assert list(report["per_task"]) == ids[3:7]  # tasks 3..6: rates 3/4, 1, 0, 1/4
    assert [json.loads(line)["task_id"] for line in out.read_text().splitlines()] == [ids[3]]
    result = runner.invoke(app, ["filter-tasks", "coa/SynthHop-v0", "--agent", "oracle", "--skip", "100000",
                                 "--out", str(tmp_path / "x.jsonl"), "--no-progress"])
    assert result.exit_code != 0 and "--skip" in result.output


def test_a_band_including_the_ends_keeps_always_and_never_solved_tasks(tmp_path):
    out, _ = _filter(tmp_path, "-k", "4", "--n", "5", "--keep", "0-1")
    assert len(out.read_text().splitlines()) == 5


@pytest.mark.parametrize("keep", ["0.9-0.1", "0.1", "a-b", "0.1-1.5"])
def test_a_bad_band_is_refused(tmp_path, keep):
    result = runner.invoke(app, ["filter-tasks", "coa/SynthHop-v0", "--agent", "oracle", "--keep", keep,
                                 "--out", str(tmp_path / "t.jsonl")])
    assert result.exit_code != 0 and "LOW-HIGH" in result.output


def test_without_a_model_or_agent_it_says_what_to_give(tmp_path):
    result = runner.invoke(app, ["filter-tasks", "coa/SynthHop-v0", "--out", str(tmp_path / "t.jsonl")])
    assert result.exit_code != 0 and "--model" in result.output


@pytest.mark.parametrize(("solved", "samples", "band"), [
    (0, 8, "never solved"), (1, 8, "kept"), (8, 8, "always solved"), (0, 0, "unscored"), (7, 8, "above band")])
def test_band_edges(solved, samples, band):
    assert band_of(solved, samples, (0.1, 0.8)) == band


def test_the_tiny_model_runs_through_the_same_path(tmp_path):
    pytest.importorskip("transformers", reason="needs the [llm] extra")
    from agents.tiny import save_tiny

    model = save_tiny(tmp_path / "tiny")
    out = tmp_path / "tasks.jsonl"
    result = runner.invoke(app, ["filter-tasks", "coa/SynthHop-v0", "--model", str(model), "-k", "2", "--n", "2",
                                 "--max-new-tokens", "16", "--max-turns", "2", "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["tasks"] == 2 and sum(report["bands"].values()) == 2 and report["model"] == str(model)
    trajectories = [json.loads(line) for line in out.with_suffix(".trajectories.jsonl").read_text().splitlines()]
    assert len(trajectories) == 4 and all(t["prompt_ids"] for t in trajectories)  # token-exact episodes


def test_env_options_reach_the_env(tmp_path):
    """`-e KEY=VALUE` sets gym.make options as in `coa eval`: here the task count of the split."""
    out = tmp_path / "t.jsonl"
    result = runner.invoke(app, ["filter-tasks", "coa/SynthHop-v0", "--agent", "oracle", "-k", "1", "--keep", "0-1",
                                 "-e", "task_options.num_tasks=10", "--no-progress", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 8  # 10 tasks, every fifth held out
    bad = runner.invoke(app, ["filter-tasks", "coa/SynthHop-v0", "--agent", "oracle", "-e", "no_equals_sign",
                              "--out", str(out)])
    assert bad.exit_code != 0 and "--env-option" in bad.output
