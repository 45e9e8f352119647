"""``coa teach`` + ``coa distill`` end to end: scripted teacher models over HTTP drive the real
multi-agent system through SynthHop, MiniWeb and a code task; each constructed run survives or
fails exactly the stage it was built for; what is kept replays and loads as SFT data."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import coa_envs  # noqa: F401
from agents.trajectory import read_trajectories, write_trajectory
from coa_cli.main import app
from coa_envs.protocol import parse_turn
from trainers.data import load_samples
from trainers.distill import EnvPool, replay_reason

pytest.importorskip("smolagents", reason="teacher systems are built on smolagents")
from tests.agents.teachers.conftest import write_system
from tests.agents.teachers.scripted import ScriptedTeam, script_from_task, serve_scripted

CODE_TASKS = Path(__file__).resolve().parents[2] / "sandbox" / "fixtures" / "livecodebench_oracle.jsonl"
SCENARIOS = ("clean", "corrected", "leaky", "wrong", "bad_action", "long", "stumble")


def _teach(env_id: str, system: Path, out: Path, *extra: str) -> dict:
    result = CliRunner().invoke(app, ["teach", env_id, "--system", str(system), "--out", str(out), "--no-progress",
                                      "--concurrency", "2", *extra])
    assert result.exit_code == 0, result.output
    return json.loads((out / "summary.json").read_text())


def _distill(*args: str) -> tuple[dict, str]:
    out = next(args[i + 1] for i, a in enumerate(args) if a == "--out")
    result = CliRunner().invoke(app, ["distill", *args])
    assert result.exit_code == 0, result.output
    return json.loads(Path(out + ".report.json").read_text()), result.output


TWO_HOP = {"task_options": {"hops": 2, "difficulty": None, "num_tasks": 20, "split": "train"}}  # coa teach plays train


@pytest.fixture(scope="module")
def synthhop_runs(tmp_path_factory):
    """Seven two-hop tasks, one scenario each, two runs each; and a team without role agents
    playing the first task once."""
    root = tmp_path_factory.mktemp("teach")
    env = gym.make("coa/SynthHop-v0", **TWO_HOP)
    tasks = env.unwrapped.tasks[:len(SCENARIOS)]
    env.close()
    scripts = [script_from_task(task, scenario) for task, scenario in zip(tasks, SCENARIOS, strict=True)]
    with serve_scripted(ScriptedTeam(scripts)) as url:
        full = write_system(root / "team.yaml", url)
        roleless = write_system(root / "roleless.yaml", url, reflector={"enabled": False},
                                verifier={"enabled": False}, manager={"planning_interval": 0})
        kwargs = json.dumps(TWO_HOP)
        summary = _teach("coa/SynthHop-v0", full, root / "team", "--n", str(len(SCENARIOS)), "-k", "2",
                         "--env-kwargs", kwargs)
        _teach("coa/SynthHop-v0", roleless, root / "roleless", "--n", "1", "--env-kwargs", kwargs)
    return root, tasks, summary


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_each_constructed_run_survives_or_fails_its_stage(synthhop_runs, tmp_path):
    root, tasks, summary = synthhop_runs
    assert (summary["episodes"], summary["accuracy"]) == (14, pytest.approx(12 / 14))  # only "wrong" fails
    assert summary["split"] == "train"  # SFT data comes from training tasks
    assert summary["teacher"]["verdicts"] == {"accept": 14, "reject": 2}  # "corrected" was sent back once
    # Edit the observations of the "stumble" runs: replay must notice.
    stumble = tasks[SCENARIOS.index("stumble")].task_id
    tampered = tmp_path / "team.jsonl"
    with open(tampered, "w", encoding="utf-8") as handle:
        for trajectory in read_trajectories(root / "team" / "trajectories.jsonl"):
            if trajectory.task_id == stumble:
                trajectory.segments[1].text = trajectory.segments[1].text.replace("Doc 2", "Doc 9")
            write_trajectory(handle, trajectory)
    out = tmp_path / "sft.jsonl"
    report, printed = _distill(str(tampered), str(root / "roleless"), "--out", str(out), "--max-turns", "4",
                               "--min-roles", "2")
    assert [(s["stage"], s["out"], s["dropped"]) for s in report["stages"]] == [
        ("convert", 15, {}),
        ("correct", 13, {"below_reward": 2}),                 # wrong x2
        ("format", 11, {"bad_action": 2}),                    # bad_action x2: the env corrected an empty query
        ("leakage", 9, {"leak:before_evidence": 2}),          # leaky x2: the plan named the answer
        ("dedup", 5, {"duplicate": 4}),                       # second runs of clean, corrected, long, stumble
        ("limits", 4, {"too_many_turns": 1}),                 # long: 5 actions > 4
        ("diversity", 3, {"few_roles": 1}),                   # the roleless team only thinks
        ("replay", 2, {"replay:observation_mismatch": 1}),    # the edited stumble run
        ("select", 2, {}),
    ]
    kept = list(read_trajectories(out))
    assert [t.task_id for t in kept] == sorted(tasks[SCENARIOS.index(s)].task_id for s in ("clean", "corrected"))
    assert "kept 2 of 15 episodes (2 of 7 tasks)" in printed and "replay" in printed


def test_kept_trajectories_are_clean_coa_that_replays_and_loads_as_sft_data(synthhop_runs, tmp_path):
    root, tasks, _ = synthhop_runs
    out, sharegpt = tmp_path / "sft.jsonl", tmp_path / "sft_sharegpt.jsonl"
    report, _ = _distill(str(root / "team"), "--out", str(out), "--sharegpt", str(sharegpt))
    kept = list(read_trajectories(out))
    expected = sorted(tasks[SCENARIOS.index(s)].task_id for s in ("clean", "corrected", "long", "stumble"))
    assert [t.task_id for t in kept] == expected and report["kept"] == 4
    pool = EnvPool()
    try:
        for trajectory in kept:
            turns = [parse_turn(s.text) for s in trajectory.segments if s.kind == "generated"]
            assert all(t.ok for t in turns) and turns[-1].answer == trajectory.answer
            assert all(len(t.tool_calls) == 1 for t in turns[:-1])
            roles = {r.tag for t in turns for r in t.roles}
            assert roles == {"plan", "think", "reflection", "suggested_answer", "double_check"}
            assert replay_reason(trajectory, pool) is None  # the same observations and reward, again
    finally:
        pool.close()
    corrected = kept[expected.index(tasks[SCENARIOS.index("corrected")].task_id)]
    assert "<suggested_answer>\nNobody Knows\n</suggested_answer>\n<double_check>" in corrected.response_text

    # Both exports load with our SFT loader, observations split off as untrained spans.
    from_trajectories, from_sharegpt = load_samples(out), load_samples(sharegpt)
    assert len(from_trajectories) == len(from_sharegpt) == 4
    for trajectory, *samples in zip(kept, from_trajectories, from_sharegpt, strict=True):
        generated = [s.text for s in trajectory.segments if s.kind == "generated"]
        observed = [s.text for s in trajectory.segments if s.kind == "observation"]
        for sample in samples:
            assert [m.role for m in sample.messages] == ["system", "user", "assistant"]
            spans = sample.messages[-1].spans
            assert [s.text for s in spans if s.trainable] == generated
            assert [s.text for s in spans if not s.trainable] == observed


def test_miniweb_and_a_code_task(tmp_path):
    web_kwargs = {"task_options": {"port": _free_port(), "split": "train"}}
    web_env = gym.make("coa/MiniWeb-v0", **web_kwargs)
    web_tasks = web_env.unwrapped.tasks[:2]
    web_env.close()
    code_env = gym.make("coa/LiveCodeBench-v4", data_path=str(CODE_TASKS))
    code_tasks = code_env.unwrapped.tasks[:2]
    code_env.close()
    scripts = [script_from_task(web_tasks[0]), script_from_task(web_tasks[1], "corrected"),
               script_from_task(code_tasks[0]), script_from_task(code_tasks[1], "bad_action")]
    with serve_scripted(ScriptedTeam(scripts)) as url:
        system = write_system(tmp_path / "team.yaml", url)
        web = _teach("coa/MiniWeb-v0", system, tmp_path / "web", "--n", "2", "--env-kwargs", json.dumps(web_kwargs))
        code = _teach("coa/LiveCodeBench-v4", system, tmp_path / "code", "--n", "2", "--data", str(CODE_TASKS),
                      "--split", "all")
    assert web["accuracy"] == 1.0 and code["accuracy"] == 1.0
    out = tmp_path / "sft.jsonl"
    report, _ = _distill(str(tmp_path / "web"), str(tmp_path / "code"), "--out", str(out))
    assert [(s["stage"], s["out"]) for s in report["stages"]][-2:] == [("replay", 3), ("select", 3)]
    assert report["dropped"] == {"bad_action": 1}
    kept = {t.env_id: t for t in read_trajectories(out)}
    assert set(kept) == {"coa/MiniWeb-v0", "coa/LiveCodeBench-v4"}
    assert set(kept["coa/MiniWeb-v0"].tool_calls) == {"web_search", "crawl_page"}
    assert kept["coa/LiveCodeBench-v4"].tool_calls == {"code": 1}
    assert "```python" in kept["coa/LiveCodeBench-v4"].answer


@pytest.mark.slow
def test_our_sft_trainer_trains_on_both_exports(synthhop_runs, tmp_path):
    pytest.importorskip("torch", reason="the SFT trainer needs torch (extra: train)")
    root, _, _ = synthhop_runs
    data = tmp_path / "data"
    _distill(str(root / "team"), "--out", str(data / "sft.jsonl"), "--sharegpt", str(data / "sft_sharegpt.jsonl"))
    config = tmp_path / "sft.yaml"
    config.write_text(json.dumps({
        "model": {"path": "tiny",
                  "tiny": {"vocab_size": 512, "hidden_size": 32, "layers": 1, "heads": 2, "kv_heads": 1}},
        "data": {"train_path": str(data), "max_seq_len": 2048},
        "optim": {"max_steps": 2, "learning_rate": 1e-3},
        "resources": {"torch_threads": 1},
        "bookkeeping": {"output_dir": str(tmp_path / "run"), "tensorboard": False, "progress": False}}))
    result = CliRunner().invoke(app, ["train", "sft", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "steps: 2" in result.output
    assert "8/8 samples kept" in result.output  # 4 trajectories x 2 formats, none cut or dropped
