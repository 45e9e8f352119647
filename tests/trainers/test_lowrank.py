"""The low-rank extraction of a fine-tune's delta: exact for a low-rank delta, measured otherwise."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from agents.tiny import build_tiny_model, save_tiny, train_tiny_tokenizer  # noqa: E402
from trainers.lowrank import extract_adapter  # noqa: E402

PROBES = ["<think>plan</think> <wiki_search>x</wiki_search>", "<answer>42</answer>"]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tiny_tokenizer()


def _pair(tmp_path, tokenizer, delta_rank: int, touch_norm: bool = False):
    base = build_tiny_model(tokenizer, hidden_size=32, layers=2, seed=0)
    tuned = build_tiny_model(tokenizer, hidden_size=32, layers=2, seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, module in tuned.named_modules():
            if isinstance(module, torch.nn.Linear) and "lm_head" not in name:
                out_dim, in_dim = module.weight.shape
                b = torch.randn(out_dim, delta_rank, generator=generator) * 0.05
                a = torch.randn(delta_rank, in_dim, generator=generator) * 0.05
                module.weight += b @ a
        if touch_norm:
            tuned.model.norm.weight += 0.1
    return (save_tiny(tmp_path / "base", tokenizer, base), save_tiny(tmp_path / "tuned", tokenizer, tuned))


def test_a_low_rank_delta_comes_back_exactly(tmp_path, tokenizer):
    base, tuned = _pair(tmp_path, tokenizer, delta_rank=2)
    report = extract_adapter(str(tuned), str(base), tmp_path / "adapter", rank=2, dtype="float32", probes=PROBES)
    assert report.energy_kept == pytest.approx(1.0, abs=1e-9) and report.dropped_delta_norm == {}
    assert report.probe_kl < 1e-6 and report.probe_top1_agreement == 1.0
    assert report.modules == 2 * 7  # q, k, v, o, gate, up, down in each layer
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 2 and config["lora_alpha"] == 2 and config["base_model_name_or_path"] == str(base)
    assert json.loads((tmp_path / "adapter" / "extraction.json").read_text())["rank"] == 2

    from agents.models import load_causal_lm

    merged, _ = load_causal_lm(str(tmp_path / "adapter"), dtype=torch.float32)  # base + adapter
    tuned_model, _ = load_causal_lm(str(tuned), dtype=torch.float32)
    for (name, ours), theirs in zip(merged.state_dict().items(), tuned_model.state_dict().values(), strict=True):
        assert torch.allclose(ours, theirs, atol=1e-5), name


def test_truncation_and_what_an_adapter_cannot_hold_are_reported(tmp_path, tokenizer):
    base, tuned = _pair(tmp_path, tokenizer, delta_rank=6, touch_norm=True)
    report = extract_adapter(str(tuned), str(base), tmp_path / "adapter", rank=2, probes=PROBES)
    assert 0.2 < report.energy_kept < 0.95 and report.energy_kept_min <= report.energy_kept
    assert list(report.dropped_delta_norm) == ["model.norm.weight"]
    assert report.probe_kl > 0 and report.dtype == "float16"
    half = extract_adapter(str(tuned), str(base), tmp_path / "half", rank=1, probes=PROBES)
    assert half.adapter_bytes < report.adapter_bytes and half.energy_kept < report.energy_kept
    with pytest.raises(ValueError, match="rank"):
        extract_adapter(str(tuned), str(base), tmp_path / "bad", rank=0)
