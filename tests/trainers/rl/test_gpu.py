"""The 0.5B GPU config end to end for a few steps (skipped without CUDA; marked gpu)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ray")

CONFIG = Path(__file__).resolve().parents[3] / "examples" / "rl_gpu_0p5b_dapo.yaml"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_config_runs_a_few_steps(tmp_path):
    from trainers.rl import train  # the warm start, then the loop
    from trainers.rl.config import load_config

    cfg = load_config(CONFIG, [f"bookkeeping.output_dir={tmp_path}", "algorithm.total_steps=2",
                               "bookkeeping.save_every=1", "model.warm_start.max_steps=5",
                               "model.warm_start.episodes=32"])
    last = train(cfg)
    assert last["perf/rollout_tokens_per_s"] > 0 and last["perf/learner_tokens_per_s"] > 0
    assert (tmp_path / "checkpoint-2" / "COMPLETE").exists()
