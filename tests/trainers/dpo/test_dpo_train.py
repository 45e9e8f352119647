"""Masked DPO on a tiny model: it learns the preference, scores only generated tokens,
resumes exactly, and refuses pairs it cannot score."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
import torch
from typer.testing import CliRunner

from trainers.dpo import load_config, read_pairs, train, write_pairs
from trainers.dpo.data import PairDataError


def _config(pairs, out, model, **overrides):
    values = {
        "data": {"train_path": str(pairs), "max_seq_len": 2048},
        "model": {"path": str(model)},
        "dpo": {"beta": 0.1},
        "optim": {"learning_rate": 2e-3, "max_steps": 6, "grad_accum": 2, "warmup_steps": 1},
        "resources": {"torch_threads": 1},
        "bookkeeping": {"output_dir": str(out), "progress": False, "tensorboard": False,
                        "seed": 5},
    }
    return load_config(values={**values, **overrides})


def test_dpo_learns_the_preference(text_pairs, tiny_dir, tmp_path):
    # eval on the training pairs themselves: a fixed set scored before and after
    result = train(_config(text_pairs, tmp_path / "run", tiny_dir, **{
        "optim.max_steps": 12, "optim.learning_rate": 5e-3, "data.eval_path": str(text_pairs),
        "bookkeeping.eval_every": 12}))
    assert result.steps == 12 and result.final_dir is not None
    assert result.losses[0] == pytest.approx(math.log(2), abs=1e-5)  # policy == reference
    assert result.reward_margins[0] == pytest.approx(0.0, abs=1e-5)
    assert sum(result.losses[-4:]) / 4 < 0.6
    (start_step, start), (end_step, end) = result.eval_metrics[0], result.eval_metrics[-1]
    assert (start_step, end_step) == (0, 12)
    assert start["eval/loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert end["eval/loss"] < 0.6
    # chosen log-prob rises relative to rejected: the policy's own margin, not only the ratio
    assert end["eval/logps/margin"] > start["eval/logps/margin"] + 1.0
    assert end["eval/rewards/accuracy"] > 0.8
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, 13))
    assert all(r["tokens_per_s"] > 0 for r in rows if "loss" in r)


def test_id_pairs_train_the_model_that_sampled_them(id_pairs, tiny_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    result = train(_config(id_pairs, tmp_path / "run", tiny_dir, **{"dpo.loss_type": "ipo"}))
    assert result.losses[-1] < result.losses[0]
    AutoModelForCausalLM.from_pretrained(result.final_dir)  # plain transformers loads it


# -- only generated tokens count ----------------------------------------------------------
def _rows(pairs_path, model_dir):
    from transformers import AutoTokenizer

    from trainers.dpo.data import prepare_pair_rows

    return prepare_pair_rows(read_pairs(pairs_path), AutoTokenizer.from_pretrained(model_dir),
                             max_seq_len=4096, truncation="error", pack_len=8192,
                             packing=True).rows


def test_row_scores_are_sums_over_generated_tokens_only(id_pairs, tiny_dir):
    from agents.tiny import load_tiny
    from trainers.dpo.reference import score_row

    _, model = load_tiny(tiny_dir)
    pairs = {p.pair_id: p for p in read_pairs(id_pairs)}
    row = _rows(id_pairs, tiny_dir)[0]
    with torch.no_grad():
        chosen, _ = score_row(model, row, "cpu", chunked=True)
        for index, pid in enumerate(row.pair_ids):
            trajectory = pairs[pid].chosen
            ids = torch.tensor([trajectory.input_ids()])
            logps = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
            per_token = logps.gather(1, ids[0, 1:, None])[:, 0]
            mask = torch.tensor(trajectory.full_loss_mask()[1:], dtype=torch.bool)
            assert chosen[index].item() == pytest.approx(per_token[mask].sum().item(), rel=1e-4)
            everything = per_token[len(trajectory.prompt_ids) - 1:].sum().item()
            assert chosen[index].item() != pytest.approx(everything, rel=1e-3)  # obs excluded


def _edited(pairs_path, out, edit):
    """The pairs with ``edit`` applied to each chosen trajectory (a copy)."""
    pairs = []
    for pair in read_pairs(pairs_path):
        chosen = dataclasses.replace(pair.chosen, segments=list(pair.chosen.segments))
        edit(chosen)
        pairs.append(dataclasses.replace(pair, chosen=chosen))
    return write_pairs(out, pairs)


def test_observation_tokens_never_change_the_loss(id_pairs, tiny_dir, tmp_path):
    """Tokens after the last generated one: as an observation they leave every step's loss
    as it was; the same tokens marked generated change it (the mask is what decides)."""
    text, ids = "\n<observation>\nnoise\n</observation>\n", [7, 8, 9, 10, 11, 12, 13, 14]

    def losses(path, name):  # steps 2 and 3: the first step's loss is log 2 whatever the data
        return train(_config(path, tmp_path / name, tiny_dir, **{
            "data.packing": False, "optim.max_steps": 3, "optim.warmup_steps": 0,
            "optim.learning_rate": 1e-2})).losses[1:]

    base = losses(id_pairs, "base")
    observed = losses(_edited(id_pairs, tmp_path / "obs.jsonl",
                              lambda t: t.add_observation(text, ids)), "obs")
    assert observed == pytest.approx(base, rel=1e-5, abs=1e-7)
    generated = losses(_edited(id_pairs, tmp_path / "gen.jsonl",
                               lambda t: t.add_generated(text, ids)), "gen")
    assert generated != pytest.approx(base, rel=1e-3)


# -- resume, reference modes ---------------------------------------------------------------
@pytest.mark.parametrize("reference", ["precompute", "frozen"])
def test_resume_continues_identically(text_pairs, tiny_dir, tmp_path, reference):
    extra = {"dpo.reference": reference, "optim.max_steps": 5}
    straight = train(_config(text_pairs, tmp_path / "a", tiny_dir, **extra))
    first = train(_config(text_pairs, tmp_path / "b", tiny_dir,
                          **{**extra, "bookkeeping.halt_at_step": 2}))
    assert first.halted and first.final_dir is None
    assert (tmp_path / "b" / "checkpoint-2" / "COMPLETE").exists()
    assert ((tmp_path / "b" / "checkpoint-2" / "reference_logps.json").exists()
            == (reference == "precompute"))
    resumed = train(_config(text_pairs, tmp_path / "b", tiny_dir,
                            **{**extra, "bookkeeping.resume": "latest"}))
    assert first.losses == straight.losses[:2]
    assert resumed.losses == straight.losses[2:]
    assert resumed.reward_margins == straight.reward_margins[2:]
    steps = [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").open()]
    assert steps == [1, 2, 3, 4, 5]  # nothing logged twice


def test_precomputed_and_frozen_references_agree(text_pairs, tiny_dir, tmp_path):
    runs = [train(_config(text_pairs, tmp_path / mode, tiny_dir, **{"dpo.reference": mode,
                                                                    "optim.max_steps": 3}))
            for mode in ("precompute", "frozen")]
    assert runs[0].losses == pytest.approx(runs[1].losses, rel=1e-5)


def test_lora_policy_uses_its_base_as_reference(text_pairs, tiny_dir, tmp_path):
    result = train(_config(text_pairs, tmp_path / "lora", tiny_dir, **{
        "dpo.reference": "frozen", "model.lora": {"r": 4, "alpha": 8},
        "optim.learning_rate": 1e-2, "optim.max_steps": 6}))
    assert result.losses[0] == pytest.approx(math.log(2), abs=1e-5)
    assert result.losses[-1] < result.losses[0]


def test_tiny_policy_tokenises_the_pairs_text(id_pairs, tmp_path):
    """model.path=tiny trains a fresh tokenizer on the text: recorded ids are not used."""
    result = train(_config(id_pairs, tmp_path / "tiny", "tiny", **{
        "model.tiny": {"vocab_size": 512, "hidden_size": 32, "layers": 1, "heads": 2,
                       "kv_heads": 1}, "optim.max_steps": 2}))
    assert result.steps == 2 and result.losses[0] == pytest.approx(math.log(2), abs=1e-5)


# -- bad input -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_without_tokenizer(tiny_dir, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    directory = tmp_path_factory.mktemp("dpo") / "no_tokenizer"
    AutoModelForCausalLM.from_pretrained(tiny_dir).save_pretrained(directory)
    return directory


def test_text_pairs_without_a_tokenizer_are_refused(text_pairs, model_without_tokenizer,
                                                    tmp_path):
    with pytest.raises(PairDataError, match="has no token ids and there is no tokenizer"):
        train(_config(text_pairs, tmp_path / "run", model_without_tokenizer))
    assert not (tmp_path / "run" / "final").exists()


def test_id_pairs_need_no_tokenizer(id_pairs, model_without_tokenizer, tmp_path):
    result = train(_config(id_pairs, tmp_path / "run", model_without_tokenizer,
                           **{"optim.max_steps": 2}))
    assert result.steps == 2 and (result.final_dir / "config.json").exists()


def test_ids_beyond_the_vocabulary_are_refused(id_pairs, tmp_path):
    from agents.tiny import save_tiny, train_tiny_tokenizer

    small = save_tiny(tmp_path / "small", tokenizer=train_tiny_tokenizer(vocab_size=300),
                      hidden_size=16, layers=1, heads=2, kv_heads=1)
    with pytest.raises(PairDataError, match="another tokenizer"):
        train(_config(id_pairs, tmp_path / "run", small))


@pytest.mark.parametrize(("override", "message"), [
    ("dpo.beta=0", "dpo.beta=0.0: must be > 0"),
    ("dpo.loss_type=hinge", "dpo.loss_type='hinge': choose one of 'sigmoid', 'ipo'"),
    ("dpo.label_smoothing=0.6", "must be in [0, 0.5)"),
    ("dpo.loss_type=ipo dpo.label_smoothing=0.1", "applies to loss_type=sigmoid"),
    ("data.pack_len=100", "must be >= 2 * data.max_seq_len"),
    ("resources.deepspeed=ds.json", "runs in one process"),
    ("beta=0.1", "unknown key 'beta'"),
])
def test_config_errors_say_what_to_change(override, message):
    from trainers.common import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(values={"data": {"train_path": "p.jsonl", "max_seq_len": 64}},
                    overrides=override.split())
    with pytest.raises(ConfigError, match=r"data\.train_path is required"):
        load_config(values={})


def _cli(*args):
    from coa_cli.main import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result, " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())


def test_cli_trains_and_reports(text_pairs, tiny_dir, tmp_path):
    config = tmp_path / "dpo.yaml"
    config.write_text(f"data: {{train_path: {text_pairs}, max_seq_len: 2048}}\n"
                      f"model: {{path: {tiny_dir}}}\n"
                      f"bookkeeping: {{output_dir: {tmp_path / 'run'}, progress: false, "
                      "tensorboard: false}\n")
    result, text = _cli("train", "dpo", "--config", str(config), "optim.max_steps=2",
                        "optim.learning_rate=1e-3")
    assert result.exit_code == 0, result.output
    assert "loss 0.6931 ->" in text and "tokens/s" in text and str(tmp_path / "run") in text


def test_cli_refuses_text_pairs_without_a_tokenizer(text_pairs, model_without_tokenizer,
                                                    tmp_path):
    config = tmp_path / "dpo.yaml"
    config.write_text(f"data: {{train_path: {text_pairs}}}\n"
                      f"model: {{path: {model_without_tokenizer}}}\n")
    result, text = _cli("train", "dpo", "--config", str(config))
    assert result.exit_code == 2 and "has no token ids and there is no tokenizer" in text
    assert "Traceback" not in result.output
