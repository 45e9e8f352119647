"""Sessions feed ``coa train sft`` as data: the gateway's JSONL is read with the recorded ids as
they are (labels on the model's own tokens only), filtered by reward, and trains."""

from __future__ import annotations

import httpx

from tests.agents.gateway.conftest import served_gateway


def _record_sessions(tiny_dir, out):
    from agents.engines.hf import HFEngine

    engine = HFEngine(str(tiny_dir))
    with served_gateway(engine, engine.tokenizer, "tiny", out=out, allow_client_reward=True) as (url, _):
        for number in range(3):
            messages = [{"role": "user", "content": f"question {number}"}]
            for _ in range(2):
                reply = httpx.post(f"{url}/sessions/sft-{number}/v1/chat/completions",
                                   json={"messages": messages, "max_tokens": 6, "seed": number}).json()
                messages += [reply["choices"][0]["message"], {"role": "user", "content": "go on"}]
            httpx.post(f"{url}/sessions/sft-{number}/finish", json={"reward": float(number)})
    return engine.tokenizer


def test_gateway_sessions_are_exact_sft_samples_and_train(tiny_dir, tmp_path):
    from agents.trajectory import read_trajectories
    from trainers.data.formats import load_samples
    from trainers.data.tokenize import IGNORE_INDEX, tokenize_sample
    from trainers.sft import load_config, train

    out = tmp_path / "sessions.jsonl"
    tokenizer = _record_sessions(tiny_dir, out)
    trajectories = list(read_trajectories(out))
    samples = load_samples(out)
    assert len(samples) == len(trajectories) == 3
    for trajectory, sample in zip(trajectories, samples, strict=True):
        tokenized = tokenize_sample(sample, tokenizer)
        assert list(tokenized.input_ids) == trajectory.input_ids()  # the recorded ids, not re-tokenised
        trained = [int(label != IGNORE_INDEX) for label in tokenized.labels]
        assert trained == trajectory.full_loss_mask()
    result = train(load_config(values={
        "model": {"path": str(tiny_dir)},
        "data": {"train_path": str(out), "min_reward": 1.0, "eval_fraction": 0.0, "max_seq_len": 512,
                 "packing": False},
        "optim": {"max_steps": 2, "learning_rate": 1e-3},
        "resources": {"torch_threads": 1},
        "bookkeeping": {"output_dir": str(tmp_path / "sft"), "progress": False, "tensorboard": False,
                        "save_every": 0, "eval_every": 0}}))
    assert result.steps == 2 and all(loss == loss for loss in result.losses)
    assert result.train_report.samples_in == result.train_report.samples_kept == 2  # rewards 1 and 2 kept
