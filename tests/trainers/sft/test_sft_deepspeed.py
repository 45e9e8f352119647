"""DeepSpeed ZeRO-2/3 (CPU, one rank, gloo): same losses as the plain loop, a ZeRO-3 checkpoint
holds the full weights, and a ZeRO-3 run resumes exactly.

Each run is a ``coa train sft`` subprocess, so DeepSpeed's process group never leaks into other
tests. Needs the ``deepspeed`` extra; slow (DeepSpeed's import alone takes seconds).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                       reason="deepspeed (extra: deepspeed) is not installed"),
]


@pytest.fixture(scope="module")
def work(tmp_path_factory, write_messages_data) -> Path:
    work = tmp_path_factory.mktemp("sft_ds")
    write_messages_data(work / "sft.jsonl", 24, 9)
    (work / "sft.yaml").write_text(
        "model: {path: tiny, tiny: {vocab_size: 384, hidden_size: 32, layers: 2, heads: 4, "
        "kv_heads: 2}}\n"
        f"data: {{train_path: {work / 'sft.jsonl'}, max_seq_len: 200, pack_len: 200}}\n"
        "optim: {grad_accum: 2, max_steps: 4, learning_rate: 3e-3, warmup_steps: 1}\n"
        "resources: {torch_threads: 1}\n"
        "bookkeeping: {progress: false, tensorboard: false, seed: 5}\n", encoding="utf-8")
    for stage in (2, 3):
        (work / f"zero{stage}.json").write_text(json.dumps(
            {"zero_optimization": {"stage": stage}, "zero_allow_untested_optimizer": True}),
            encoding="utf-8")
    return work


def _run(work: Path, name: str, *overrides: str) -> dict[int, float]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "coa_cli.main", "train", "sft", "--config",
                           str(work / "sft.yaml"), f"bookkeeping.output_dir={work / name}",
                           *overrides],
                          env=env, cwd=work, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    records = map(json.loads, (work / name / "metrics.jsonl").open())
    return {r["step"]: r["loss"] for r in records if "loss" in r}


@pytest.fixture(scope="module")
def plain(work) -> dict[int, float]:
    return _run(work, "plain")


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_stage_trains_the_same_losses_as_the_plain_loop(work, plain, stage):
    losses = _run(work, f"zero{stage}", f"resources.deepspeed={work / f'zero{stage}.json'}")
    assert losses == pytest.approx(plain, rel=1e-5)


def test_zero3_checkpoint_holds_the_full_trained_weights(work, plain):
    import torch
    from transformers import AutoModelForCausalLM

    final = work / "zero3" / "final"
    if not final.exists():
        _run(work, "zero3", f"resources.deepspeed={work / 'zero3.json'}")
    sharded = AutoModelForCausalLM.from_pretrained(final)
    reference = AutoModelForCausalLM.from_pretrained(work / "plain" / "final")
    for (name, a), b in zip(sharded.named_parameters(), reference.parameters(), strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5), name


def test_zero3_run_resumes_on_the_same_losses(work, plain):
    ds = f"resources.deepspeed={work / 'zero3.json'}"
    first = _run(work, "resume", ds, "bookkeeping.halt_at_step=2")
    assert sorted(first) == [1, 2]
    resumed = _run(work, "resume", ds, "--resume")
    assert resumed == pytest.approx(plain, rel=1e-5)
