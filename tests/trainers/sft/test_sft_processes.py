"""The trainer as separate processes: a ``torchrun`` launch, and a run killed with SIGKILL.

Both start real ``coa train sft`` processes (seconds of interpreter start-up each), so they
are marked slow. Distributed runs use the gloo backend on 127.0.0.1, so no GPU is needed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainers.sft import load_config, train

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def config_file(tmp_path_factory, write_messages_data) -> Path:
    work = tmp_path_factory.mktemp("sft_procs")
    data = write_messages_data(work / "sft.jsonl", 40, 9)
    config = work / "sft.yaml"
    config.write_text(
        "model:\n  path: tiny\n"
        "  tiny: {vocab_size: 384, hidden_size: 32, layers: 2, heads: 4, kv_heads: 2, "
        "attention_dropout: 0.1}\n"
        f"data: {{train_path: {data}, max_seq_len: 200, pack_len: 200}}\n"
        "optim: {learning_rate: 3e-3, warmup_steps: 2}\n"
        "resources: {torch_threads: 1}\n"
        "bookkeeping: {progress: false, tensorboard: false, seed: 5}\n", encoding="utf-8")
    return config


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "coa_cli.main", "train", "sft", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _losses(metrics: Path) -> dict[int, float]:
    """Step -> loss; a step logged twice (killed after logging, redone on resume) keeps the last."""
    return {r["step"]: r["loss"] for r in map(json.loads, metrics.open()) if "loss" in r}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_torchrun_two_processes_match_one_process_with_twice_the_accumulation(config_file, tmp_path):
    """Each rank takes every other row of the epoch order; gradients are averaged by DDP and
    scaled to a token-level mean, so 2 ranks x 1 row equals 1 process x 2 rows per step."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                "--master_addr=127.0.0.1", f"--master_port={_free_port()}", "-m",
                "coa_cli.main", "train", "sft"]
    # no dropout here: each rank draws its own masks, so only a dropout-free run can match
    common = ["optim.max_steps=4", "model.tiny.attention_dropout=0.0"]
    ddp = subprocess.run([*launcher, "--config", str(config_file), *common, "optim.grad_accum=1",
                          f"bookkeeping.output_dir={tmp_path / 'ddp'}"], env=_env(), cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = train(load_config(config_file, [*common, "optim.grad_accum=2",
                                             f"bookkeeping.output_dir={tmp_path / 'single'}"]))
    ddp_losses = _losses(tmp_path / "ddp" / "metrics.jsonl")
    assert [ddp_losses[s] for s in (1, 2, 3, 4)] == pytest.approx(single.losses, rel=1e-5)
    assert ddp.stdout.count("model: ") == 1, "only rank 0 reports"


def test_a_run_killed_with_sigkill_resumes_like_an_uninterrupted_one(config_file, tmp_path):
    straight = train(load_config(config_file, ["optim.max_steps=24",
                                               f"bookkeeping.output_dir={tmp_path / 'a'}"]))

    out = tmp_path / "b"
    run = ["--config", str(config_file), "optim.max_steps=24", "bookkeeping.save_every=2",
           f"bookkeeping.output_dir={out}"]
    process = subprocess.Popen(_cli(*run), env=_env(), cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "checkpoint-6" / "COMPLETE").exists():
        assert process.poll() is None, process.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint-6 within 300 s"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert not (out / "final").exists(), "the run finished before it could be killed"
    # a save torn by the kill (weights written, no COMPLETE marker yet) must not be resumed from
    torn = out / "checkpoint-1000"
    torn.mkdir()
    (torn / "config.json").write_text("{}", encoding="utf-8")

    resumed = train(load_config(config_file, [*run[2:], "bookkeeping.resume=latest"]))
    start = 24 - len(resumed.losses)
    assert start >= 6 and start % 2 == 0
    assert resumed.losses == straight.losses[start:], "resumed losses must equal the straight run's"
    assert _losses(out / "metrics.jsonl") == pytest.approx(dict(enumerate(straight.losses, 1)))
