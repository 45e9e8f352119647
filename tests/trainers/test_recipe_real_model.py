"""A reduced CPU recipe on the real model: SFT must beat the pretrained baseline on held-out tasks.

The whole pipeline of ``examples/recipe_smollm2_cpu.yaml`` (baseline eval, oracle teacher on
training tasks, ``coa distill``, masked SFT of SmolLM2-135M-Instruct, one DAPO step, held-out
evals, report) with few tasks and steps, run as a user runs it: ``coa recipe run``. Held-out
accuracy is measured on 10 tasks the teacher never played, 2 sampling seeds each. A rerun
must reuse every finished stage. Slow: ~6 min on a quiet 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REDUCED = [
    "heldout_tasks=10", "seeds=[0,1]", "envs=[]", "pool.tasks=0", "teacher_tasks=48",
    "sft.optim.num_epochs=2", "sft.optim.learning_rate=1.0e-4",
    "rl.algorithm.total_steps=1", "rl.algorithm.prompts_per_step=2", "rl.algorithm.group_size=2",
    "rl.algorithm.minibatch_size=4", "rl.resources.micro_batch_size=2", "rl.bookkeeping.eval_every=0",
    "rl.bookkeeping.save_every=1",
]


def _recipe(out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "coa_cli.main", "recipe", "run",
                           str(ROOT / "examples" / "recipe_smollm2_cpu.yaml"), *REDUCED, "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=3000, cwd=ROOT)


def test_reduced_recipe_sft_beats_the_baseline_on_held_out_tasks(smollm2_dir, tmp_path):
    out = tmp_path / "recipe"
    first = _recipe(out)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    primary = report["evals"]["primary"]
    baseline, sft = primary["baseline"], primary["SFT"]
    assert baseline["tasks"] == sft["tasks"] == 10 and sft["episodes"] == 20
    assert sft["accuracy"] > baseline["accuracy"], (baseline, sft)
    assert report["complete"] and primary["RL"] is not None
    assert set(report["stages"]) == {"baseline", "teacher", "distill", "sft", "sft_eval", "rl", "rl_eval"}
    assert all(s["wall_s"] > 0 for s in report["stages"].values())
    assert (out / "report.png").stat().st_size > 10_000 and "SFT − baseline" in (out / "report.md").read_text()
    # the teacher played training tasks only: none of them is among the held-out ones
    teacher = {json.loads(line)["task_id"] for line in (out / "teacher" / "primary" / "trajectories.jsonl").open()}
    held_out = {json.loads(line)["task_id"] for line in
                (out / "baseline" / "primary" / "seed0" / "trajectories.jsonl").open()}
    assert teacher and held_out and not teacher & held_out

    again = _recipe(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("reused") == 7 and "running" not in again.stdout
