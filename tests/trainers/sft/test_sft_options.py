"""Trainer options a user switches on: checkpointing, bf16, the schedule, the CLI, DeepSpeed."""

from __future__ import annotations

import importlib.util
import json
from itertools import pairwise

import pytest

from trainers.sft import load_config, train


@pytest.fixture(scope="module")
def messages_file(tmp_path_factory, write_messages_data):
    return write_messages_data(tmp_path_factory.mktemp("sft_opts") / "sft.jsonl", 12, 7)


def _config(data, out, **overrides):
    """The run's config; ``overrides`` use dotted keys (``optim.max_steps``)."""
    values = {
        "data": {"train_path": str(data), "max_seq_len": 160, "pack_len": 320},
        "model": {"path": "tiny", "tiny": {"vocab_size": 384, "hidden_size": 32, "layers": 2,
                                           "heads": 4, "kv_heads": 2}},
        "optim": {"grad_accum": 1, "max_steps": 4, "learning_rate": 3e-3},
        "bookkeeping": {"output_dir": str(out), "progress": False, "tensorboard": False,
                        "seed": 3},
    }
    return load_config(values={**values, **overrides})


def test_gradient_checkpointing_trains_the_same_losses(messages_file, tmp_path):
    plain = train(_config(messages_file, tmp_path / "plain"))
    checkpointed = train(_config(messages_file, tmp_path / "ckpt",
                                 **{"model.gradient_checkpointing": True}))
    assert checkpointed.losses == pytest.approx(plain.losses, rel=1e-5)


def test_bf16_autocast_tracks_fp32(messages_file, tmp_path):
    fp32 = train(_config(messages_file, tmp_path / "fp32", **{"optim.max_steps": 2}))
    bf16 = train(_config(messages_file, tmp_path / "bf16",
                         **{"optim.max_steps": 2, "optim.precision": "bf16"}))
    assert bf16.losses[0] == pytest.approx(fp32.losses[0], rel=2e-2)
    assert all(loss == loss for loss in bf16.losses)  # finite, not NaN


def test_cosine_schedule_warms_up_then_decays(messages_file, tmp_path):
    train(_config(messages_file, tmp_path / "run", **{"optim.max_steps": 8,
                                                      "optim.warmup_steps": 3}))
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "run" / "metrics.jsonl").open()
           if '"lr"' in line]
    assert lrs[:3] == pytest.approx([1e-3, 2e-3, 3e-3])  # linear warmup to the peak
    assert all(b < a for a, b in pairwise(lrs[2:])) and lrs[-1] == 0.0


def test_cli_overrides_and_bad_keys(messages_file, tmp_path):
    from typer.testing import CliRunner

    from coa_cli.main import app

    config = tmp_path / "sft.yaml"
    config.write_text(f"model: {{path: tiny, tiny: {{vocab_size: 384, hidden_size: 32}}}}\n"
                      f"data: {{train_path: {messages_file}, max_seq_len: 160}}\n"
                      "optim: {learning_rate: 2e-5}\n", encoding="utf-8")
    runner = CliRunner()
    ok = runner.invoke(app, ["train", "sft", "--config", str(config), "optim.max_steps=2",
                             f"bookkeeping.output_dir={tmp_path / 'out'}",
                             "bookkeeping.progress=false", "model.tiny.layers=1"])
    assert ok.exit_code == 0, ok.output
    assert "steps: 2" in ok.output
    saved = json.loads((tmp_path / "out" / "final" / "config.json").read_text())
    assert saved["num_hidden_layers"] == 1 and saved["hidden_size"] == 32
    bad = runner.invoke(app, ["train", "sft", "--config", str(config), "optim.learnin_rate=1"])
    assert bad.exit_code == 2 and "learnin_rate" in bad.output
    moved = runner.invoke(app, ["train", "sft", "--config", str(config), "learning_rate=1e-4"])
    assert moved.exit_code == 2 and "optim.learning_rate" in moved.output


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is not None,
                    reason="deepspeed is installed; this checks the message when it is not")
def test_deepspeed_without_the_package_says_how_to_get_it(messages_file, tmp_path):
    ds = tmp_path / "zero3.json"
    ds.write_text('{"zero_optimization": {"stage": 3}}', encoding="utf-8")
    with pytest.raises(RuntimeError, match=r"coa-envs\[deepspeed\]"):
        train(_config(messages_file, tmp_path / "ds", **{"resources.deepspeed": str(ds)}))


def test_shipped_example_configs_are_valid():
    from pathlib import Path

    examples = Path(__file__).resolve().parents[3] / "examples"
    for yaml_file in sorted(examples.glob("sft_*.yaml")):
        config = load_config(yaml_file)
        if config.resources.deepspeed:
            ds = json.loads((examples.parent / config.resources.deepspeed).read_text(
                encoding="utf-8"))
            assert ds["zero_optimization"]["stage"] in (2, 3)
    for json_file in examples.glob("sft_ds_*.json"):
        json.loads(json_file.read_text(encoding="utf-8"))
