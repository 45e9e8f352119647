"""LoRA RL: only adapters train, syncs carry adapters only, checkpoints resume exactly, and the
saved adapter loads with its base in the engines ``coa eval``/``coa serve`` use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tests.trainers.rl.tiny_runs import tiny_run_config  # noqa: E402
from trainers.rl.config import RLConfig  # noqa: E402

LORA = {"r": 4, "alpha": 8}
# the tiny run with a rank-4 adapter: 3 steps at a learning rate that moves it, a checkpoint
# every step, no eval
LORA_RUN = {"algorithm": {"total_steps": 3, "lr": 1e-2}, "model": {"lora": LORA},
            "bookkeeping": {"save_every": 1, "eval_every": 0}}


def _config(out: Path, **overrides) -> RLConfig:
    return tiny_run_config(out, LORA_RUN, **overrides)


def _adapter(directory: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(directory / "adapter_model.safetensors"))


def test_lora_learner_trains_adapters_only_and_syncs_them(tmp_path):
    from agents.engines.lora import LoraWeights
    from trainers.rl.learner import Learner

    torch.set_num_threads(1)
    cfg = _config(tmp_path, **{"algorithm.kl_coef": 0.1})
    learner = Learner(cfg)
    trained = {n for n, p in learner.module.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    optimised = {id(p) for group in learner.optim.optimizer.param_groups for p in group["params"]}
    assert optimised == {id(p) for p in learner.module.parameters() if p.requires_grad}
    assert learner.reference is None  # the base with the adapter off is the KL reference

    state = learner.policy_state()
    assert isinstance(state, LoraWeights)
    full = sum(p.numel() * 4 for p in learner.policy.get_base_model().parameters())
    assert 0 < state.nbytes < full / 5
    assert state.config["r"] == 4 and all(".lora_" in k for k in state.tensors)
    saved = learner.state_dict()
    assert set(saved["module"]) == {k for k in learner.module.state_dict() if "lora_" in k}


def test_lora_run_updates_only_adapters_and_resumes_exactly(tmp_path):
    from agents.models import load_causal_lm
    from trainers.rl.loop import train

    straight = tmp_path / "straight"
    last = train(_config(straight))
    assert last["mismatch/logprob_abs_diff"] < 1e-3  # the engine serves the synced adapter
    assert 0 < last["sync/bytes"] < 200_000
    final = straight / "final"
    assert (final / "adapter_config.json").exists() and not (final / "model.safetensors").exists()
    config = json.loads((final / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "base" and (final / "base").is_dir()
    adapters = _adapter(final)
    assert any(float(t.abs().sum()) > 0 for k, t in adapters.items() if "lora_B" in k)

    # the base did not move: the saved base equals a freshly built tiny model
    from trainers.rl.models import load_tokenizer_and_policy

    _, fresh = load_tokenizer_and_policy(_config(tmp_path / "x"), dtype="float32")
    from safetensors.torch import load_file

    base = load_file(str(final / "base" / "model.safetensors"))
    fresh_state = fresh.state_dict()
    assert all(torch.equal(base[k], fresh_state[k]) for k in base)

    # checkpoints hold the trainable tensors only
    ckpt = torch.load(straight / "checkpoint-3" / "learner.pt", weights_only=False)
    assert all("lora_" in k for k in ckpt["module"])

    interrupted = tmp_path / "interrupted"
    train(_config(interrupted), stop_after=1)
    train(_config(interrupted, **{"bookkeeping.resume": "latest"}))
    resumed = _adapter(interrupted / "final")
    assert resumed.keys() == adapters.keys()
    assert all(torch.equal(resumed[k], adapters[k]) for k in adapters)

    # base + adapter loads as one merged model (what `coa eval`/`coa serve` run)
    model, tokenizer = load_causal_lm(str(final), dtype=torch.float32)
    assert type(model).__name__.endswith("ForCausalLM") and tokenizer is not None
    assert not any("lora_" in n for n, _ in model.named_parameters())


def test_saved_adapter_is_served_by_the_hf_engine(tmp_path):
    """``coa eval --model final/`` and ``coa serve`` build the hf engine from a path: an
    adapter directory gives the same tokens as the learner's adapted policy."""
    from agents.engines import GenerationRequest, SamplingParams, build_engine
    from trainers.rl.learner import Learner

    torch.set_num_threads(1)
    learner = Learner(_config(tmp_path))
    with torch.no_grad():
        for name, p in learner.policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    learner.save_pretrained(tmp_path / "final")
    served = build_engine("hf", model=str(tmp_path / "final"))
    live = build_engine("hf", model=learner.policy.get_base_model(), tokenizer=learner.tokenizer)
    params = SamplingParams(max_new_tokens=6, temperature=0.0, stop=())
    request = [GenerationRequest(token_ids=(1, 2, 3, 4), params=params)]
    a, b = served.generate(request, params)[0], live.generate(request, params)[0]
    assert a.token_ids == b.token_ids
    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_ppo_lora_adapts_the_separate_critic_too(tmp_path):
    from trainers.rl.learner import Learner

    torch.set_num_threads(1)
    cfg = _config(tmp_path, **{"algorithm": {"name": "ppo", "critic": "separate",
                                             "group_size": 1, "prompts_per_step": 4}})
    learner = Learner(cfg)
    critic_trained = {n for n, p in learner.critic.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in critic_trained)
    assert all("lora_" in n or n.startswith("value_head") for n in critic_trained)
    whole = _config(tmp_path, **{"algorithm": {"name": "ppo", "critic": "separate",
                                               "group_size": 1, "prompts_per_step": 4},
                                 "model.lora.critic": False})
    full_critic = Learner(whole).critic
    assert all(p.requires_grad for p in full_critic.parameters())


def test_lora_config_errors_name_the_key(tmp_path):
    from trainers.common import ConfigError

    with pytest.raises(ConfigError, match=r"model\.lora\.r"):
        _config(tmp_path, **{"model.lora.r": -1})
    with pytest.raises(ConfigError, match="fsdp"):
        _config(tmp_path, **{"resources": {"use_ray": True, "learner_workers": 2,
                                           "learner_strategy": "fsdp"}})
