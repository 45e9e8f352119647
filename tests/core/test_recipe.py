"""The recipe's plumbing without a model: stage commands, reuse and resume, the report's maths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coa_cli.recipe import runner as stages_mod
from coa_cli.recipe.config import RecipeConfig, load_recipe
from coa_cli.recipe.report import collect, write_report
from coa_cli.recipe.runner import RecipeError, run_stages
from coa_cli.recipe.stages import eval_runs, plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recipe_smollm2_cpu.yaml"


def _config(tmp_path: Path, **values) -> RecipeConfig:
    return load_recipe(EXAMPLE, [f"output_dir={tmp_path}"] + [f"{k}={v}" for k, v in values.items()])


def test_every_stage_uses_the_same_task_settings_and_only_the_split_differs(tmp_path):
    cfg = _config(tmp_path)
    by_name = {s.name: s for s in plan(cfg, tmp_path)}
    assert list(by_name) == ["baseline", "teacher", "distill", "sft", "sft_eval", "pool", "rl", "export",
                             "rl_eval"]
    teacher = by_name["teacher"].commands
    assert [c[1] for c in teacher] == ["coa/SynthHop-v1", "coa/MiniWebLarge-v0"]  # both trained envs
    assert all(c[c.index("--split") + 1] == "train" for c in teacher)
    assert all(c[c.index("--agent") + 1] == "agents.teachers.scripted:ScriptedTeam" for c in teacher)
    primary = [c for c in by_name["baseline"].commands if c[1] == "coa/SynthHop-v1"]
    assert len(primary) == 2 and all(c[c.index("--split") + 1] == "test" for c in primary)
    assert {c[c.index("--seed") + 1] for c in primary} == {"0", "1"}
    prompt = f"system_prompt={json.dumps(cfg.env_options['system_prompt'])}"
    assert prompt in teacher[0] and all(prompt in c for c in primary)
    assert by_name["sft_eval"].commands[0][by_name["sft_eval"].commands[0].index("--model") + 1] == \
        str(tmp_path / "sft" / "final")
    from trainers.rl.config import load_config as load_rl
    from trainers.sft.config import load_config as load_sft

    for name, file in (("rl", "rl.yaml"), ("sft", "sft.yaml")):
        (tmp_path / file).write_text(by_name[name].files[file])
    rl, sft = load_rl(tmp_path / "rl.yaml"), load_sft(tmp_path / "sft.yaml")  # valid trainer configs
    assert rl.model.path == str(tmp_path / "sft" / "final") and rl.env.train_split == "train"
    entries = {e.name: e for e in rl.env.mixture}
    assert set(entries) == {"primary", "miniweb"} and sum(e.weight for e in entries.values()) == \
        pytest.approx(1.0)
    primary_kwargs = entries["primary"].env_kwargs
    assert primary_kwargs["system_prompt"] == cfg.env_options["system_prompt"] and primary_kwargs["max_turns"] == 4
    # RL plays only its pool's tasks; the held-out eval plays the test split without that list
    assert primary_kwargs["task_options"]["task_list"] == str(tmp_path / "pool" / "primary.jsonl")
    assert entries["miniweb"].env_kwargs["task_options"] == {
        "port": 47311, "split": "train", "task_list": str(tmp_path / "pool" / "miniweb.jsonl")}
    assert rl.env.eval_kwargs == {"task_options": {"task_list": None}}
    # exact match, the env's own reward: nothing pays for a hedged answer
    assert "reward" not in primary_kwargs and "reward" not in cfg.env_options
    assert sft.model.path == "smollm2-135m"
    assert {e.name: e.path for e in sft.data.envs} == {n: str(tmp_path / "distill" / f"{n}.jsonl")
                                                       for n in ("primary", "miniweb")}
    distill = by_name["distill"].commands[0]
    replay_env = json.loads(distill[distill.index("--env-kwargs") + 1])  # replayed on the teacher's tasks
    assert replay_env["task_options"]["split"] == "train" and replay_env["max_turns"] == 4
    pool = by_name["pool"].commands
    assert [c[:2] for c in pool] == [["filter-tasks", "coa/SynthHop-v1"], ["filter-tasks", "coa/MiniWebLarge-v0"]]
    for command, skipped in zip(pool, (cfg.teacher_tasks, cfg.envs[0].teacher_tasks), strict=True):
        # candidates come after the tasks the teacher played for SFT, sampled like RL samples
        assert command[command.index("--skip") + 1] == str(skipped)
        assert command[command.index("--keep") + 1] == cfg.pool.keep
        assert command[command.index("--model") + 1] == str(tmp_path / "sft" / "final")
    assert by_name["rl"].depends == ("sft", "pool")
    # RL's model ships as an adapter, and the RL eval scores that adapter (the shipped agent)
    export = by_name["export"].commands[0]
    assert export[:2] == ["export-adapter", str(tmp_path / "rl" / "final")]
    assert export[export.index("--base") + 1] == "smollm2-135m" and export[export.index("--rank") + 1] == "8"
    rl_eval = by_name["rl_eval"].commands[0]
    assert rl_eval[rl_eval.index("--model") + 1] == str(tmp_path / "export" / "adapter")
    assert by_name["rl_eval"].depends == ("export",)


def test_without_a_pool_or_further_envs_rl_trains_on_every_training_task_of_one_env(tmp_path):
    cfg = _config(tmp_path, envs="[]", **{"pool.tasks": 0, "rl_reward": "{metric: f1}", "export.rank": 0})
    by_name = {s.name: s for s in plan(cfg, tmp_path)}
    assert "pool" not in by_name and by_name["rl"].depends == ("sft",) and "export" not in by_name
    rl_eval = by_name["rl_eval"].commands[0]
    assert rl_eval[rl_eval.index("--model") + 1] == str(tmp_path / "rl" / "final")
    from trainers.rl.config import load_config as load_rl

    (tmp_path / "rl.yaml").write_text(by_name["rl"].files["rl.yaml"])
    rl = load_rl(tmp_path / "rl.yaml")
    assert rl.env.task_list is None and rl.env.kwargs["reward"] == {"metric": "f1"}
    assert rl.env.eval_kwargs["reward"] == {"name": "em_f1", "metric": "em"}


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
    with pytest.raises(ValueError, match="train: true"):
        RecipeConfig(envs=[{"name": "w", "env_id": "coa/MiniWebLarge-v0", "n": 4, "train": True}])
    with pytest.raises(ValueError, match="sum below 1"):
        RecipeConfig(envs=[{"name": n, "env_id": "coa/MiniWebLarge-v0", "n": 4, "train": True,
                            "teacher_tasks": 4, "weight": 0.6} for n in ("a", "b")])
    with pytest.raises(ValueError, match=r"pool\.keep"):
        RecipeConfig(pool={"keep": "0.9-0.1"})
    with pytest.raises(ValueError, match="rl_reward"):
        plan(_config(tmp_path, rl_reward="{metric: f1}"), tmp_path)


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
    assert sorted(set(calls)) == ["export", "pool", "rl", "rl_eval", "sft", "sft_eval"]  # not baseline/teacher
    assert (tmp_path / "baseline" / "kept.txt").exists()
    calls.clear()
    run_stages(changed, tmp_path, plan(changed, tmp_path), force=("distill",), echo=lambda _: None)
    assert sorted(set(calls)) == ["distill", "export", "pool", "rl", "rl_eval", "sft", "sft_eval"]
    calls.clear()
    wider = _config(tmp_path, **{"sft.optim.learning_rate": 1e-4, "pool.keep": "0.1-0.9"})
    run_stages(wider, tmp_path, plan(wider, tmp_path), echo=lambda _: None)
    assert sorted(set(calls)) == ["export", "pool", "rl", "rl_eval"]  # a new band reselects the pool only


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
    assert calls == ["rl", "export", "rl_eval", "rl_eval", "rl_eval", "rl_eval"]
    assert (tmp_path / "rl" / "checkpoints").is_dir()  # RL resumes from its checkpoints
    assert "--resume" in stages[6].commands[0]


def _write_run(directory: Path, correct: dict[str, bool]) -> None:
    from agents.trajectory import Trajectory, write_trajectory

    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "trajectories.jsonl", "w", encoding="utf-8") as handle:
        for task_id, ok in correct.items():
            write_trajectory(handle, Trajectory(env_id="e", task_id=task_id, reward=float(ok)))
    (directory / "summary.json").write_text(json.dumps({"status_counts": {"ok": len(correct)},
                                                        "mean_turns": 2.0, "tool_calls_per_episode": 1.0}))


def test_the_report_pairs_stages_per_task_and_judges_the_targets(tmp_path):
    cfg = _config(tmp_path, envs="[]", seeds="[0,1]")
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


def test_the_report_shows_the_pool_the_rl_dynamics_and_every_envs_targets(tmp_path):
    cfg = _config(tmp_path)
    stages = plan(cfg, tmp_path)
    for stage, count in {"baseline": 0, "sft_eval": 10, "rl_eval": 10}.items():
        for run, spec in eval_runs(cfg, tmp_path, stage):
            _write_run(run.out, {f"{spec.name}{i}": i < count for i in range(20)})
    pool = tmp_path / "pool"
    pool.mkdir()
    for name in ("primary", "miniweb"):  # what coa filter-tasks writes
        (pool / f"{name}.jsonl").write_text("".join(json.dumps({"task_id": f"k{i}", "pass_rate": 0.5}) + "\n"
                                                    for i in range(3)))
        (pool / f"{name}.report.json").write_text(json.dumps({
            "tasks": 8, "samples": 4, "keep": [0.25, 0.75], "bands": {"never solved": 2, "always solved": 3,
                                                                       "kept": 3},
            "per_task": {f"k{i}": [2 if i < 3 else 4 * (i % 2), 4] for i in range(8)}, "wall_s": 1.0}))
    (tmp_path / "rl").mkdir()
    rows = [{"step": 1, "rollout/reward_mean": 0.5, "rollout/accuracy": 0.5, "sampling/kept_pass_rate": 0.5,
             "sampling/drawn_pass_rate": 0.7, "sampling/groups_kept": 4, "sampling/groups_drawn": 6,
             "policy/entropy": 0.4, "kl/ref": 0.01, "rollout/response_tokens": 300.0,
             "rollout/tool_calls": 2.0, "rollout/tool_errors": 0.5}]
    (tmp_path / "rl" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "load.jsonl").write_text("".join(json.dumps({"time": i, "load": [x, 1.0, 1.0]}) + "\n"
                                                 for i, x in enumerate((2.0, 6.0, 4.0))))
    data = write_report(cfg, tmp_path, stages)
    assert data["load_during_run"] == {"samples": 3, "mean": 4.0, "min": 2.0, "median": 4.0, "max": 6.0}
    assert data["pool"]["primary"]["kept"] == 3 and data["pool"]["primary"]["kept_pass_rate_mean"] == 0.5
    point = data["rl"]["curve"][0]
    assert point["kl_to_sft"] == 0.01 and point["tool_failure_share"] == 0.25 and point["groups_drawn"] == 6
    assert set(data["targets"]) == {"sft_gain", "rl_gain", "miniweb_sft_gain", "miniweb_rl_not_below_sft",
                                    "wall_time"}
    assert data["targets"]["miniweb_rl_not_below_sft"]["met"] and not data["targets"]["rl_gain"]["met"]
    text = (tmp_path / "report.md").read_text()
    assert "RL's task pool" in text and "| primary | 8 × 4 | 3 (0.25-0.75)" in text
    assert "mean 4.0, median 4.0, min 2.0, max 6.0" in text
    assert "## RL dynamics per step" in text and "| 1 | 0.5 | 0.5 | 0.7 | 4 | 6 | 0.4 | 0.01 |" in text


def test_rl_dynamics_keep_small_figures_to_four_significant_digits():
    """The KL to the SFT policy lives near 1e-4: rounded to 4 decimals, its curve in report.png
    was a staircase of 0, 1e-4 and 2e-4 (every step below 5e-5 read as no drift at all)."""
    from coa_cli.recipe.report import _dynamics

    point = _dynamics({"step": 3, "kl/ref": 0.0000412345, "policy/entropy": 1.23456789,
                       "time/rollout_s": 12345.678})
    assert point["kl_to_sft"] == 4.123e-05
    assert point["entropy"] == 1.235 and point["rollout_s"] == 12350.0


def test_lanes_of_a_stage_run_at_once_and_each_lane_in_order(tmp_path, monkeypatch):
    import threading
    import time

    from coa_cli.recipe.stages import Stage

    spans: dict[str, list[float]] = {}
    lock = threading.Lock()

    def fake_run(command, log, env, stage):
        start = time.perf_counter()
        time.sleep(0.3)
        with lock:
            spans[command[0]] = [start, time.perf_counter(), log.name]

    monkeypatch.setattr(stages_mod, "_run", fake_run)
    stage = Stage("sft_eval", [["a1"], ["a2"], ["b1"], ["b2"]], lanes=("a", "a", "b", "b"))
    stages_mod._run_stage(stage, tmp_path, {}, lanes=2)
    assert spans["a1"][1] <= spans["a2"][0] and spans["b1"][1] <= spans["b2"][0]  # in order per lane
    assert spans["a1"][0] < spans["b1"][1] and spans["b1"][0] < spans["a1"][1]  # the lanes overlap
    assert {spans["a1"][2], spans["b2"][2]} == {"log.a.txt", "log.b.txt"}
    spans.clear()
    stages_mod._run_stage(stage, tmp_path, {}, lanes=1)  # one lane at a time: the listed order
    assert spans["a2"][1] <= spans["b1"][0] and spans["a1"][2] == "log.txt"

    def fail_b(command, log, env, stage):
        if command[0] == "b1":
            raise RecipeError("stage sft_eval: b1 failed")
        time.sleep(0.1)

    monkeypatch.setattr(stages_mod, "_run", fail_b)
    with pytest.raises(RecipeError, match="b1 failed"):
        stages_mod._run_stage(stage, tmp_path, {}, lanes=2)
    assert _config(tmp_path).parallel_lanes == 2
    assert all(len(s.lanes) in (0, len(s.commands)) for s in plan(_config(tmp_path), tmp_path))


def test_the_recipe_plays_the_same_synthhop_tasks_as_the_shipped_agents_v0_run(tmp_path):
    """The recipe moved to ``coa/SynthHop-v1``; the shipped agent's run used v0. Its figures stay
    comparable only if every task the recipe plays (held-out, teacher and pool) is the same."""
    import warnings

    import gymnasium as gym

    cfg = _config(tmp_path)
    options = dict(cfg.env_options)
    task_options = dict(options.pop("task_options"))

    def questions(env_id: str, split: str) -> list[str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # v0 is kept one release and says so
            env = gym.make(env_id, task_options={**task_options, "split": split}, **options)
        return [task.question for task in env.unwrapped.tasks]

    assert cfg.env_id == "coa/SynthHop-v1"
    played = {"test": cfg.heldout_tasks, "train": cfg.teacher_tasks + cfg.pool.tasks}
    for split, count in played.items():
        old, new = questions("coa/SynthHop-v0", split), questions(cfg.env_id, split)
        assert len(new) >= count and old[:count] == new[:count], split
