"""The recipe's plumbing without a model: stage commands, reuse and resume, the report's maths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coa_cli.recipe import stages as stages_mod
from coa_cli.recipe.config import RecipeConfig, load_recipe
from coa_cli.recipe.report import collect, write_report
from coa_cli.recipe.stages import RecipeError, eval_runs, plan, run_stages

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recipe_smollm2_cpu.yaml"


def _config(tmp_path: Path, **values) -> RecipeConfig:
    return load_recipe(EXAMPLE, [f"output_dir={tmp_path}"] + [f"{k}={v}" for k, v in values.items()])


def test_every_stage_uses_the_same_task_settings_and_only_the_split_differs(tmp_path):
    cfg = _config(tmp_path)
    by_name = {s.name: s for s in plan(cfg, tmp_path)}
    assert list(by_name) == ["baseline", "teacher", "distill", "sft", "sft_eval", "rl", "rl_eval"]
    teacher = by_name["teacher"].commands[0]
    assert teacher[:2] == ["eval", "coa/SynthHop-v0"] and teacher[teacher.index("--split") + 1] == "train"
    primary = [c for c in by_name["baseline"].commands if c[1] == "coa/SynthHop-v0"]
    assert len(primary) == 2 and all(c[c.index("--split") + 1] == "test" for c in primary)
    assert {c[c.index("--seed") + 1] for c in primary} == {"0", "1"}
    prompt = f"system_prompt={json.dumps(cfg.env_options['system_prompt'])}"
    assert prompt in teacher and all(prompt in c for c in primary)
    assert by_name["sft_eval"].commands[0][by_name["sft_eval"].commands[0].index("--model") + 1] == \
        str(tmp_path / "sft" / "final")
    from trainers.rl.config import load_config as load_rl
    from trainers.sft.config import load_config as load_sft

    for name, file in (("rl", "rl.yaml"), ("sft", "sft.yaml")):
        (tmp_path / file).write_text(by_name[name].files[file])
    rl, sft = load_rl(tmp_path / "rl.yaml"), load_sft(tmp_path / "sft.yaml")  # valid trainer configs
    assert rl.model.path == str(tmp_path / "sft" / "final") and rl.env.train_split == "train"
    assert rl.env.kwargs["system_prompt"] == cfg.env_options["system_prompt"] and rl.env.max_turns == 3
    # F1 is RL's training reward only; its held-out eval, like every eval, scores exact match
    assert rl.env.kwargs["reward"] == {"metric": "f1"}
    assert rl.env.eval_kwargs["reward"] == {"name": "em_f1", "metric": "em"}
    assert "reward" not in cfg.env_options
    assert sft.model.path == "smollm2-135m" and sft.data.train_path == str(tmp_path / "distill" / "sft.jsonl")
    distill = by_name["distill"].commands[0]
    replay_env = json.loads(distill[distill.index("--env-kwargs") + 1])  # replayed on the teacher's tasks
    assert replay_env["task_options"]["split"] == "train" and replay_env["max_turns"] == 3


def test_bad_settings_say_what_to_change(tmp_path):
    with pytest.raises(ValueError, match="set per stage"):
        RecipeConfig(env_options={"task_options": {"split": "all"}})
    with pytest.raises(ValueError, match=r"rl\.model\.path.*set by the recipe"):
        RecipeConfig(rl={"model": {"path": "x"}})
    RecipeConfig(rl={"model": {"dtype": "float32"}})  # other keys of an owned section are fine
    with pytest.raises(ValueError, match="greedy"):
        RecipeConfig(temperature=0.0)
    with pytest.raises(ValueError, match="unknown key 'modle'"):
        load_recipe(EXAMPLE, ["modle=x"])


def test_finished_stages_are_reused_and_a_change_reruns_only_what_depends_on_it(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(stages_mod, "_run", lambda command, log, env, stage: calls.append(stage))
    cfg = _config(tmp_path)
    run_stages(cfg, tmp_path, plan(cfg, tmp_path), echo=lambda _: None)
    assert calls[:2] == ["baseline", "baseline"] and "rl" in calls
    calls.clear()
    run_stages(cfg, tmp_path, plan(cfg, tmp_path), echo=lambda _: None)
    assert calls == []  # everything reused
    changed = _config(tmp_path, **{"sft.optim.learning_rate": 1e-4})
    (tmp_path / "baseline" / "kept.txt").write_text("x")
    run_stages(changed, tmp_path, plan(changed, tmp_path), echo=lambda _: None)
    assert sorted(set(calls)) == ["rl", "rl_eval", "sft", "sft_eval"]  # not the baseline or teacher
    assert (tmp_path / "baseline" / "kept.txt").exists()
    calls.clear()
    run_stages(changed, tmp_path, plan(changed, tmp_path), force=("distill",), echo=lambda _: None)
    assert sorted(set(calls)) == ["distill", "rl", "rl_eval", "sft", "sft_eval"]


def test_an_interrupted_stage_resumes_in_place_and_a_failure_says_where_to_look(tmp_path, monkeypatch):
    cfg = _config(tmp_path)
    stages = plan(cfg, tmp_path)

    def fail_in_rl(command, log, env, stage):
        if stage == "rl":
            (tmp_path / "rl" / "checkpoints").mkdir(parents=True, exist_ok=True)
            raise RecipeError("stage rl: boom")

    monkeypatch.setattr(stages_mod, "_run", fail_in_rl)
    with pytest.raises(RecipeError, match="boom"):
        run_stages(cfg, tmp_path, stages, echo=lambda _: None)
    assert json.loads((tmp_path / "rl" / "stage.json").read_text())["status"] == "running"
    calls: list[str] = []
    monkeypatch.setattr(stages_mod, "_run", lambda command, log, env, stage: calls.append(stage))
    run_stages(cfg, tmp_path, stages, echo=lambda _: None)
    assert calls == ["rl", "rl_eval", "rl_eval", "rl_eval", "rl_eval"]
    assert (tmp_path / "rl" / "checkpoints").is_dir()  # RL resumes from its checkpoints
    assert "--resume" in stages[5].commands[0]


def _write_run(directory: Path, correct: dict[str, bool]) -> None:
    from agents.trajectory import Trajectory, write_trajectory

    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "trajectories.jsonl", "w", encoding="utf-8") as handle:
        for task_id, ok in correct.items():
            write_trajectory(handle, Trajectory(env_id="e", task_id=task_id, reward=float(ok)))
    (directory / "summary.json").write_text(json.dumps({"status_counts": {"ok": len(correct)},
                                                        "mean_turns": 2.0, "tool_calls_per_episode": 1.0}))


def test_the_report_pairs_stages_per_task_and_judges_the_targets(tmp_path):
    cfg = _config(tmp_path, transfer="[]", seeds="[0,1]")
    stages = plan(cfg, tmp_path)
    tasks = [f"t{i}" for i in range(20)]
    solved = {"baseline": 0, "sft_eval": 12, "rl_eval": 16}  # tasks solved by both seeds
    for stage, count in solved.items():
        for run, _ in eval_runs(cfg, tmp_path, stage):
            _write_run(run.out, {t: i < count for i, t in enumerate(tasks)})
    data = collect(cfg, tmp_path, stages)
    primary = data["evals"]["primary"]
    assert primary["baseline"]["accuracy"] == 0.0 and primary["SFT"]["accuracy"] == 0.6
    assert primary["RL"]["per_seed"] == {"0": 0.8, "1": 0.8} and primary["RL"]["tasks"] == 20
    gain = data["gains"]["primary"]["rl_minus_sft"]
    assert gain["mean"] == 0.2 and gain["ci95"][0] > 0  # 4 tasks better, none worse
    assert data["targets"]["sft_gain"]["met"] and data["targets"]["rl_gain"]["met"]
    assert data["targets"]["wall_time"]["met"] is None  # no stage finished: not judged yet
    assert not data["complete"]
    write_report(cfg, tmp_path, stages)
    text = (tmp_path / "report.md").read_text()
    assert "0.600 [" in text and "+0.200 [" in text and "Partial" in text
    assert (tmp_path / "report.png").stat().st_size > 5000
