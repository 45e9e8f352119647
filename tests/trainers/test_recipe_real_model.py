"""A reduced CPU recipe on the real model: pool selection by pass rate, then RL on informative groups.

The whole pipeline of ``examples/recipe_smollm2_cpu.yaml`` (baseline, scripted teacher on both
envs, ``coa distill``, LoRA SFT, the pool stage's ``coa filter-tasks`` on the SFT model, a few
LoRA DAPO steps on the pools, the export to an adapter, held-out evals, report) with few
tasks and steps, run as a user runs it: ``coa recipe run``. It asserts what the pool and RL
are for: every task RL plays had a pass rate inside the band, and RL updated on groups whose
rewards differ. A rerun must reuse every finished stage. Slow: ~20 min on a quiet 2-core
machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# its own limit: the suite's 600 s is for one test, this is a whole recipe
pytestmark = [pytest.mark.slow, pytest.mark.timeout(6600)]

ROOT = Path(__file__).resolve().parents[2]
REDUCED = [
    "heldout_tasks=8", "seeds=[0,1]", "teacher_tasks=64", "envs.miniweb.teacher_tasks=24", "envs.miniweb.n=4",
    "envs.miniweb.env_options.task_options.port=47391",  # not the example's port: a full run may be going
    "pool.tasks=12", "pool.samples=4", "pool.keep=0.25-0.75",
    "rl.algorithm.total_steps=2", "rl.algorithm.prompts_per_step=2", "rl.algorithm.group_size=4",
    "rl.algorithm.minibatch_size=8", "rl.algorithm.max_sampling_rounds=2", "rl.resources.micro_batch_size=4",
    "rl.bookkeeping.save_every=1",
]


def _recipe(out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "coa_cli.main", "recipe", "run",
                           str(ROOT / "examples" / "recipe_smollm2_cpu.yaml"), *REDUCED, "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=6000, cwd=ROOT)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_reduced_recipe_pools_by_pass_rate_and_trains_rl_on_informative_groups(smollm2_dir, tmp_path):
    out = tmp_path / "recipe"
    first = _recipe(out)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["complete"]
    primary = report["evals"]["primary"]
    assert primary["baseline"]["tasks"] == primary["SFT"]["tasks"] == 8 and primary["SFT"]["episodes"] == 16
    assert primary["SFT"]["accuracy"] > primary["baseline"]["accuracy"], primary

    # The pool: candidates after the teacher's tasks, kept iff their pass rate is in the band.
    for name in ("primary", "miniweb"):
        pool = _jsonl(out / "pool" / f"{name}.jsonl")
        band = json.loads((out / "pool" / f"{name}.report.json").read_text())
        assert band["keep"] == [0.25, 0.75] and band["tasks"] == 12 and band["bands"]["kept"] == len(pool)
        assert all(0.25 <= row["pass_rate"] <= 0.75 and row["samples"] == 4 for row in pool), pool
        rates = band["per_task"]
        assert sum(1 for solved, played in rates.values() if 0.25 <= solved / max(played, 1) <= 0.75) == len(pool)
        teacher = {r["task_id"] for r in _jsonl(out / "teacher" / name / "trajectories.jsonl")}
        assert teacher and not teacher & set(rates)  # the pool's candidates were not taught
        assert report["pool"][name]["kept"] == len(pool)

    # RL plays the pools' tasks only, and every group it trained on was informative.
    rl_config = json.loads((out / "rl" / "config.json").read_text())
    lists = {e["name"]: e["env_kwargs"]["task_options"]["task_list"] for e in rl_config["env"]["envs"]}
    assert lists == {n: str(out / "pool" / f"{n}.jsonl") for n in ("primary", "miniweb")}
    steps = [r for r in _jsonl(out / "rl" / "metrics.jsonl") if "rollout/reward_mean" in r]
    assert len(steps) == 2
    trained = [r for r in steps if r.get("train/episodes", 0) > 0]
    assert trained, steps  # at least one update happened
    for row in trained:
        assert 0 < row["sampling/groups_kept"] <= 2 and row["sampling/groups_drawn"] >= row["sampling/groups_kept"]
        assert 0.0 < row["sampling/kept_pass_rate"] < 1.0  # neither all right nor all wrong
        assert row["train/episodes"] == 4 * row["sampling/groups_kept"]
        assert "kl/ref" in row and "policy/entropy" in row
    assert report["rl"]["curve"][0]["groups_drawn"] >= 2

    # The RL eval scored the exported adapter, and the run left its provenance beside it.
    provenance = json.loads((out / "export" / "adapter" / "provenance.json").read_text())
    assert provenance["heldout"]["primary"]["RL"] == primary["RL"] and len(provenance["commits"]) == 1
    assert (out / "export" / "adapter" / "adapter_model.safetensors").stat().st_size < 5_000_000

    again = _recipe(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("reused") == 9 and "running" not in again.stdout
