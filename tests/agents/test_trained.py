"""Trained agents by name: a shipped adapter merged into its base once, reused, merged again when it changes."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from agents import trained  # noqa: E402
from agents.models import resolve_model  # noqa: E402


def _tuned(tmp_path, tiny_tokenizer, tiny_model, scale: float):
    from agents.tiny import build_tiny_model, save_tiny

    model = build_tiny_model(tiny_tokenizer)
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight += scale * torch.outer(
            torch.linspace(-1, 1, model.config.hidden_size), torch.linspace(1, -1, model.config.hidden_size))
    return save_tiny(tmp_path / f"tuned{scale}", tiny_tokenizer, model)


def test_a_trained_name_resolves_to_its_base_with_the_adapter_merged(tmp_path, monkeypatch, tiny_dir,
                                                                     tiny_tokenizer, tiny_model):
    from agents.models import load_causal_lm
    from trainers.lowrank import extract_adapter

    tuned = _tuned(tmp_path, tiny_tokenizer, tiny_model, 0.05)
    adapter = tmp_path / "shipped"
    extract_adapter(str(tuned), str(tiny_dir), adapter, rank=1, dtype="float32", probes=["<answer>1</answer>"])
    monkeypatch.setitem(trained.TRAINED, "tiny-coa", trained.TrainedModel("tiny-coa", "test", str(tiny_dir),
                                                                          directory=str(adapter)))
    cache = tmp_path / "cache"
    merged = resolve_model("tiny-coa", cache_dir=cache)
    ours, _ = load_causal_lm(merged, dtype=torch.float32)
    theirs, _ = load_causal_lm(str(tuned), dtype=torch.float32)
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name
    marker = json.loads((cache / "tiny-coa" / "coa_model.json").read_text())
    assert marker["base"] == str(tiny_dir) and len(marker["adapter_sha256"]) == 64
    stamp = (cache / "tiny-coa" / "coa_model.json").stat().st_mtime_ns
    assert resolve_model("tiny-coa", cache_dir=cache) == merged  # reused, not merged again
    assert (cache / "tiny-coa" / "coa_model.json").stat().st_mtime_ns == stamp
    # a new adapter under the same name is merged again
    extract_adapter(str(_tuned(tmp_path, tiny_tokenizer, tiny_model, 0.2)), str(tiny_dir), adapter, rank=1,
                    dtype="float32", probes=["<answer>1</answer>"])
    resolve_model("tiny-coa", cache_dir=cache)
    assert json.loads((cache / "tiny-coa" / "coa_model.json").read_text())["adapter_sha256"] != \
        marker["adapter_sha256"]


def test_an_unknown_or_missing_agent_says_so(tmp_path, monkeypatch):
    with pytest.raises(KeyError, match="not a shipped trained agent"):
        trained.adapter_dir("nope")
    monkeypatch.setitem(trained.TRAINED, "ghost-coa", trained.TrainedModel("ghost-coa", "", "smollm2-135m",
                                                                           directory=str(tmp_path)))
    with pytest.raises(FileNotFoundError, match=r"no adapter_model\.safetensors"):
        resolve_model("ghost-coa", cache_dir=tmp_path / "cache")
