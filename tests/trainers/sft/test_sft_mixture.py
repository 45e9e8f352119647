"""SFT on a mixture of envs: rows drawn by weight per step, per-env metrics, exact resume."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trainers.common import ConfigError
from trainers.common.mixture import mixture_entries
from trainers.sft import load_config, train
from trainers.sft.config import SFTMixtureEntry
from trainers.sft.sources import MixedRows


def _mixed(weights=(3.0, 1.0), counts=(6, 3), cursors=None):
    entries = mixture_entries([{"id": "coa/SynthHop-v0", "weight": weights[0], "path": "a"},
                               {"id": "coa/NQ-v1", "weight": weights[1], "path": "b"}],
                              "data.envs", SFTMixtureEntry)
    return MixedRows(entries, [0, counts[0]], list(counts), seed=4, cursors=cursors)


def test_rows_come_by_weight_and_each_env_walks_its_own_epochs():
    rows = _mixed()
    picks = [rows.take(step, 2) for step in range(1, 201)]
    sources = [source for step in picks for source, _ in step]
    assert abs(sources.count(0) / len(sources) - 0.75) < 0.05
    firsts = [row for step in picks for source, row in step if source == 1]
    assert all(6 <= row < 9 for row in firsts)  # NQ's rows are its own block
    assert sorted(firsts[:3]) == [6, 7, 8] and sorted(firsts[3:6]) == [6, 7, 8]  # one epoch each
    assert [rows.take(s, 2) for s in range(1, 11)] != picks[:10]  # cursors moved on


def test_a_resumed_stream_draws_what_the_uninterrupted_one_draws():
    straight = _mixed()
    expected = [straight.take(step, 3) for step in range(1, 21)]
    first = _mixed()
    head = [first.take(step, 3) for step in range(1, 8)]
    state = json.loads(json.dumps(first.state()))  # through the checkpoint's JSON
    resumed = _mixed(cursors=state)
    assert head + [resumed.take(step, 3) for step in range(8, 21)] == expected


@pytest.fixture(scope="module")
def mixture_values(tmp_path_factory):
    data = tmp_path_factory.mktemp("mix")
    return {
        "data": {"envs": [
            {"id": "coa/SynthHop-v0", "weight": 0.75, "path": str(data / "synthhop.jsonl"),
             "eval_path": str(data / "synthhop_test.jsonl"),
             "env_kwargs": {"task_options": {"num_tasks": 100}}},
            {"id": "coa/NQ-v1", "weight": 0.25, "path": str(data / "nq.jsonl"),
             "eval_path": str(data / "nq_test.jsonl")}],
            "generate": {"n": 20}, "max_seq_len": 1024, "pack_len": 1024},
        "model": {"path": "tiny", "tiny": {"vocab_size": 1024, "hidden_size": 32, "layers": 1,
                                           "heads": 2, "kv_heads": 1, "attention_dropout": 0.1}},
        "optim": {"max_steps": 6, "grad_accum": 2, "learning_rate": 3e-3},
        "resources": {"torch_threads": 1},
        "bookkeeping": {"progress": False, "tensorboard": False, "eval_every": 3, "seed": 2},
    }


def _run(values, out, **book):
    return train(load_config(values={**values, "bookkeeping": {
        **values["bookkeeping"], "output_dir": str(out), **book}}))


def test_mixture_run_logs_per_env_metrics_and_resumes_exactly(mixture_values, tmp_path):
    straight = _run(mixture_values, tmp_path / "a")
    rows = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").open()]
    train_rows = [r for r in rows if "loss" in r]
    drawn = {key for r in train_rows for key in r if key.startswith("loss/")}
    assert drawn == {"loss/SynthHop-v0", "loss/NQ-v1"}
    assert all(sum(v for k, v in r.items() if k.startswith("rows/")) == 2 for r in train_rows)
    evals = [r for r in rows if "eval_loss" in r]
    assert [r["step"] for r in evals] == [0, 3, 6]
    assert all({"eval_loss/SynthHop-v0", "eval_loss/NQ-v1"} <= set(r) for r in evals)
    assert evals[-1]["eval_loss/SynthHop-v0"] < evals[0]["eval_loss/SynthHop-v0"]
    # the held-out files came from the envs' test split, the training files from train
    data = mixture_values["data"]["envs"]
    train_q = {json.loads(line)["task_id"] for line in Path(data[0]["path"]).read_text().splitlines()}
    test_q = {json.loads(line)["task_id"] for line in Path(data[0]["eval_path"]).read_text().splitlines()}
    assert train_q and test_q and not train_q & test_q

    first = _run(mixture_values, tmp_path / "b", halt_at_step=2)
    state = json.loads((tmp_path / "b" / "checkpoint-2" / "trainer_state.json").read_text())
    assert set(state["position"]["streams"]) == {"SynthHop-v0", "NQ-v1"}
    resumed = _run(mixture_values, tmp_path / "b", resume="latest")
    assert first.losses + resumed.losses == straight.losses


@pytest.mark.parametrize(("envs", "extra", "message"), [
    ([{"id": "coa/NoSuchEnv-v0", "path": "a"}], {}, "unknown env id 'coa/NoSuchEnv-v0'"),
    ([{"id": "coa/NQ-v1", "weight": 0, "path": "a"}], {},
     "the weights sum to 0; they must sum to a positive number"),
    ([{"id": "coa/NQ-v1", "path": "a"}], {"train_path": "x.jsonl"}, "drop data.train_path"),
    ([{"id": "coa/NQ-v1", "path": "a"}], {"generate": {"env_id": "coa/NQ-v1"}},
     "data.generate.env_id"),
    ([{"id": "coa/NQ-v1"}], {}, "give it a path"),
])
def test_mixture_config_errors(envs, extra, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(values={"data": {"envs": envs, **extra}})


def test_a_missing_file_without_generate_says_how_to_make_it(tmp_path):
    config = load_config(values={"data": {"envs": [{"id": "coa/NQ-v1",
                                                    "path": str(tmp_path / "nq.jsonl")}]},
                                 "bookkeeping": {"output_dir": str(tmp_path / "run"),
                                                 "progress": False}})
    with pytest.raises(FileNotFoundError, match=r"set data\.generate"):
        train(config)
