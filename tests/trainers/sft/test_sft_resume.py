"""Checkpoint and resume: a stopped-and-resumed run continues exactly as an uninterrupted one."""

from __future__ import annotations

import json

import pytest
import torch

from agents.tiny import synthetic_coa_texts
from trainers.sft import load_config, train


@pytest.fixture(scope="module")
def sharegpt_file(tmp_path_factory):
    """The seed's ShareGPT export format, so this test also runs the import path end to end."""
    rows = [{"conversations": [{"from": "human", "value": f"question {i}"},
                               {"from": "gpt", "value": text}]}
            for i, text in enumerate(synthetic_coa_texts(8, seed=5))]
    path = tmp_path_factory.mktemp("sft") / "sft.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def _config(data, out, **overrides):
    """The run's config; ``overrides`` use dotted keys (``optim.max_steps``)."""
    values = {
        "data": {"train_path": str(data), "max_seq_len": 160, "pack_len": 320},
        # attention dropout makes the RNG matter: a resume that lost it would diverge
        "model": {"path": "tiny", "tiny": {"vocab_size": 384, "hidden_size": 32, "layers": 2,
                                           "heads": 4, "kv_heads": 2, "attention_dropout": 0.1}},
        "optim": {"grad_accum": 2, "max_steps": 5, "learning_rate": 3e-3, "warmup_steps": 2,
                  "weight_decay": 0.01},
        "bookkeeping": {"output_dir": str(out), "progress": False, "tensorboard": False,
                        "seed": 11},
    }
    return load_config(values={**values, **overrides})


@pytest.mark.parametrize("variant", ["full", "lora"])
def test_resume_continues_bit_exactly(sharegpt_file, tmp_path, variant):
    extra = {"model.lora": {"r": 4, "alpha": 8, "dropout": 0.1}} if variant == "lora" else {}
    straight = train(_config(sharegpt_file, tmp_path / "a", **extra))
    assert straight.steps == 5

    first = train(_config(sharegpt_file, tmp_path / "b", **{"bookkeeping.halt_at_step": 2},
                          **extra))
    assert first.halted and first.final_dir is None
    assert (tmp_path / "b" / "checkpoint-2" / "COMPLETE").exists()
    resumed = train(_config(sharegpt_file, tmp_path / "b", **{"bookkeeping.resume": "latest"},
                            **extra))

    assert first.losses == straight.losses[:2]
    assert resumed.losses == straight.losses[2:], "resumed losses must equal the straight run's"
    # the row budget gives a few rows per epoch, so the run crosses epochs after the resume
    assert len(set(straight.losses)) == 5


def test_final_and_intermediate_checkpoints_load_with_from_pretrained(sharegpt_file, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = train(_config(sharegpt_file, tmp_path / "run", **{
        "optim.max_steps": 4, "bookkeeping.save_every": 2, "bookkeeping.keep_checkpoints": 1}))
    assert [p.name for p in (tmp_path / "run").glob("checkpoint-*")] == ["checkpoint-4"]
    for directory in (result.final_dir, tmp_path / "run" / "checkpoint-4"):
        tokenizer = AutoTokenizer.from_pretrained(directory)
        model = AutoModelForCausalLM.from_pretrained(directory)
        assert model.config._attn_implementation == "sdpa"
        ids = tokenizer.apply_chat_template([{"role": "user", "content": "question 1"}],
                                            add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)
        out = model.generate(**ids, max_new_tokens=5, do_sample=False)
        assert out.shape[1] > ids["input_ids"].shape[1]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2, 3, 4]
    assert all(m["tokens_per_s"] > 0 for m in metrics if "loss" in m)


def test_lora_final_model_is_merged_and_matches_the_trained_adapter(sharegpt_file, tmp_path):
    from transformers import AutoModelForCausalLM

    result = train(_config(sharegpt_file, tmp_path / "lora", **{
        "optim.max_steps": 3, "model.lora": {"r": 4, "alpha": 8},
        "model.tiny.attention_dropout": 0.0}))
    merged = AutoModelForCausalLM.from_pretrained(result.final_dir)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    base = train(_config(sharegpt_file, tmp_path / "base", **{
        "optim.max_steps": 1, "optim.learning_rate": 1e-12, "model.tiny.attention_dropout": 0.0}))
    untouched = AutoModelForCausalLM.from_pretrained(base.final_dir)
    diffs = [not torch.allclose(a, b) for a, b in zip(merged.parameters(),
                                                      untouched.parameters(), strict=True)]
    assert any(diffs), "merging the adapter must change the base weights"
