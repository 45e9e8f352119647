"""The vllm engine as RL uses it, with vLLM mocked at its API boundary (``vllm.LLM``,
``vllm.SamplingParams``, ``vllm.EngineArgs``): vllm is a GPU-only extra, not installed here.

What is checked is what the engine *asks* vLLM for and does with the answers: processed
(post-temperature) logprobs where the installed vLLM offers ``logprobs_mode``, no logprobs
(so the learner recomputes them) where it does not, and a prefix-cache reset after every
weight load. The same engine against a real vLLM on a GPU: ``test_vllm_gpu.py``.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from agents.engines import GenerationRequest, SamplingParams


class _Tokenizer:
    eos_token = "</s>"

    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 50 for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(97 + i % 26) for i in ids)


def _fake_vllm(with_logprobs_mode: bool, calls: list) -> types.ModuleType:
    """A stand-in ``vllm`` module that records every call the engine makes."""
    module = types.ModuleType("vllm")

    if with_logprobs_mode:
        @dataclass
        class EngineArgs:
            model: str = ""
            logprobs_mode: str = "raw_logprobs"
    else:
        @dataclass
        class EngineArgs:
            model: str = ""

    class LLM:
        def __init__(self, model, seed=0, **kwargs):
            calls.append(("LLM", {"model": model, "seed": seed, **kwargs}))

        def get_tokenizer(self):
            return _Tokenizer()

        def generate(self, prompts, sampling, use_tqdm=False, lora_request=None):
            calls.append(("generate", prompts, sampling))
            if lora_request is not None:
                calls.append(("lora_request", lora_request))
            step = [{5: SimpleNamespace(logprob=-0.25)}, {7: SimpleNamespace(logprob=-1.5)}]
            return [SimpleNamespace(outputs=[SimpleNamespace(
                token_ids=[5, 7], logprobs=step, finish_reason="length", stop_reason=None)])
                for _ in prompts]

        def collective_rpc(self, fn, args=()):
            worker = SimpleNamespace(model_runner=SimpleNamespace(model=SimpleNamespace(
                load_weights=lambda items: calls.append(("load_weights", dict(items))))))
            return [fn(worker, *args)]

        def reset_prefix_cache(self):
            calls.append(("reset_prefix_cache",))
            return True

    def sampling_params(**kwargs):
        return SimpleNamespace(**kwargs)

    @dataclass
    class LoRARequest:  # vllm.lora.request.LoRARequest(lora_name, lora_int_id, lora_path)
        lora_name: str
        lora_int_id: int
        lora_path: str

    module.EngineArgs, module.LLM, module.SamplingParams = EngineArgs, LLM, sampling_params
    module.lora = types.ModuleType("vllm.lora")
    module.lora.request = types.ModuleType("vllm.lora.request")
    module.lora.request.LoRARequest = LoRARequest
    return module


@pytest.fixture
def vllm_api(monkeypatch):
    def install(with_logprobs_mode: bool) -> list:
        calls: list = []
        fake = _fake_vllm(with_logprobs_mode, calls)
        monkeypatch.setitem(sys.modules, "vllm", fake)
        monkeypatch.setitem(sys.modules, "vllm.lora", fake.lora)
        monkeypatch.setitem(sys.modules, "vllm.lora.request", fake.lora.request)
        return calls

    return install


def _generate(engine, temperature):
    params = SamplingParams(max_new_tokens=2, temperature=temperature, stop=())
    return engine.generate([GenerationRequest(token_ids=(1, 2, 3), params=params)], params)[0]


def test_asks_for_processed_logprobs_where_vllm_offers_them(vllm_api):
    from agents.engines.vllm import VLLMEngine

    calls = vllm_api(with_logprobs_mode=True)
    engine = VLLMEngine("some/model", dtype="bfloat16")
    assert calls[0][1]["logprobs_mode"] == "processed_logprobs" and engine.processed_logprobs
    completion = _generate(engine, temperature=0.7)
    assert completion.token_ids == (5, 7) and completion.logprobs == (-0.25, -1.5)
    sent = calls[-1][2][0]
    assert sent.logprobs == 0 and sent.temperature == 0.7  # the sampled token's, tempered


def test_without_logprobs_mode_a_tempered_request_returns_no_logprobs(vllm_api):
    """Raw logprobs of a tempered sample would bias every ratio; none makes the learner
    recompute them at the rollout temperature."""
    from agents.engines.vllm import VLLMEngine

    calls = vllm_api(with_logprobs_mode=False)
    engine = VLLMEngine("some/model")
    assert "logprobs_mode" not in calls[0][1] and not engine.processed_logprobs
    assert _generate(engine, temperature=0.7).logprobs == ()
    assert _generate(engine, temperature=1.0).logprobs == (-0.25, -1.5)  # raw == processed


def test_a_users_own_logprobs_mode_is_kept(vllm_api):
    from agents.engines.vllm import VLLMEngine

    calls = vllm_api(with_logprobs_mode=True)
    engine = VLLMEngine("some/model", logprobs_mode="raw_logprobs")
    assert calls[0][1]["logprobs_mode"] == "raw_logprobs" and not engine.processed_logprobs


def test_rollout_worker_weight_sync_loads_then_resets_the_prefix_cache(vllm_api):
    """Through the RL rollout worker's set_weights: the KV blocks cached under the old
    weights must not serve the next batch."""
    from agents.engines.vllm import VLLMEngine
    from trainers.rl.config import load_config
    from trainers.rl.rollout import RolloutWorker

    calls = vllm_api(with_logprobs_mode=True)
    engine = VLLMEngine("some/model")
    worker = RolloutWorker(load_config(values={"resources.use_ray": False}), engine=engine)
    try:
        for version in (1, 2):
            worker.set_weights({"w": version}, version)
    finally:
        worker.close()
    events = [c for c in calls if c[0] in ("load_weights", "reset_prefix_cache")]
    assert events == [("load_weights", {"w": 1}), ("reset_prefix_cache",),
                      ("load_weights", {"w": 2}), ("reset_prefix_cache",)]
    assert worker.weights_version == 2


def test_the_mock_mirrors_vllms_engine_args_shape():
    """The detection reads dataclass fields, as vLLM's EngineArgs is a dataclass."""
    from agents.engines.vllm import _supports_logprobs_mode

    assert _supports_logprobs_mode(_fake_vllm(True, []))
    assert not _supports_logprobs_mode(_fake_vllm(False, []))
    assert not _supports_logprobs_mode(types.ModuleType("vllm"))
    assert dataclasses.is_dataclass(_fake_vllm(True, []).EngineArgs)


def test_lora_sync_goes_through_vllms_lora_path_with_a_new_id_per_version(vllm_api, tmp_path):
    """LoRA RL syncs adapters only: each version becomes a peft adapter directory served
    under a fresh LoRARequest id (vLLM caches adapters by id), after a prefix-cache reset."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from safetensors.torch import load_file

    from agents.engines.lora import LoraWeights
    from agents.engines.vllm import VLLMEngine
    from trainers.rl.config import load_config
    from trainers.rl.rollout import RolloutWorker

    calls = vllm_api(with_logprobs_mode=True)
    engine = VLLMEngine("some/model", enable_lora=True, max_lora_rank=4)
    worker = RolloutWorker(load_config(values={"resources.use_ray": False}), engine=engine)
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    try:
        for version in (1, 2, 3):
            weights = LoraWeights({key: torch.full((4, 8), float(version))},
                                  {"r": 4, "lora_alpha": 8.0, "lora_dropout": 0.0,
                                   "target_modules": ["q_proj"]})
            worker.set_weights(weights, version)
            _generate(engine, temperature=1.0)
            request = [c for c in calls if c[0] == "lora_request"][-1][1]
            assert request.lora_int_id == version
            assert load_file(f"{request.lora_path}/adapter_model.safetensors")[key][0, 0] == version
    finally:
        worker.close()
    assert sum(c[0] == "reset_prefix_cache" for c in calls) == 3
    assert not any(c[0] == "load_weights" for c in calls)  # the base never moves


def test_an_adapter_directory_is_served_as_its_base_plus_the_adapter(vllm_api, tmp_path):
    from agents.engines.vllm import VLLMEngine

    calls = vllm_api(with_logprobs_mode=True)
    adapter = tmp_path / "final"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        '{"base_model_name_or_path": "org/base-model", "r": 8, "peft_type": "LORA"}')
    engine = VLLMEngine(str(adapter))
    built = calls[0][1]
    assert built["model"] == "org/base-model" and built["enable_lora"] and built["max_lora_rank"] == 8
    _generate(engine, temperature=1.0)
    assert [c for c in calls if c[0] == "lora_request"][-1][1].lora_path == str(adapter)
