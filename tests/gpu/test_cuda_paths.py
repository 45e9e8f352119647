"""The CUDA path on a real GPU: bf16 steps against fp32 references, the ``hf`` engine's
continuous batching, checkpoint save and resume.

Marked ``gpu`` and skipped, with the reason, where no CUDA device is present; the device
machine runs them through ``benchmarks/gpu_check.sh``. Each tolerance is stated beside its
reason: bf16 keeps 8 mantissa bits (relative spacing 2**-8 ~ 0.4%), so one forward over a
few layers moves a loss by well under 1% and a gradient's direction hardly at all, while a
lost update (a bf16 weight step rounded away, a missing loss scale) moves them by far more.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the [llm] extra")

#: ``COA_TEST_DEVICE=cpu`` runs the same code on the CPU: the dry run of
#: ``benchmarks/gpu_check.sh --device cpu`` before device time is spent.
DEVICE = os.environ.get("COA_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                 reason="needs a CUDA device")]

LOSS_RTOL = 1e-2      # one bf16 forward of a 4-layer model vs fp32
GRAD_COSINE = 0.99    # direction of the whole gradient, bf16 autocast vs fp32
CURVE_RTOL = 3e-2     # per-step loss of an 8-step bf16 run vs the fp32 run (errors compound)


@pytest.fixture(scope="module")
def tokenizer():
    from agents.tiny import train_tiny_tokenizer

    return train_tiny_tokenizer(vocab_size=512)


def _flat_grads(model):
    return torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])


def _sft_rows(n: int, seed: int) -> list[dict]:
    from agents.tiny import synthetic_coa_texts

    return [{"messages": [{"role": "user", "content": f"question {i}"},
                          {"role": "assistant", "content": text}]}
            for i, text in enumerate(synthetic_coa_texts(n, seed=seed))]


# -- SFT ----------------------------------------------------------------------------------


def test_bf16_sft_step_matches_the_fp32_reference(tokenizer):
    """The trainer's bf16 mode (fp32 master weights, bf16 autocast, the varlen kernel) gives
    the loss and gradient of the fp32 computation on one packed row of several samples."""
    from agents.tiny import build_tiny_model, synthetic_coa_texts
    from trainers.data import Message, SftSample, pack_samples, pack_to_batch, split_observations, tokenize_sample
    from trainers.sft.attention import set_attention
    from trainers.sft.model import loss_sum

    torch.manual_seed(0)
    reference = build_tiny_model(tokenizer, hidden_size=256, layers=4, heads=8, kv_heads=4)
    reference = reference.to(DEVICE).train()
    low = copy.deepcopy(reference)
    samples = [tokenize_sample(SftSample(f"s{i}", (Message("user", f"q{i}"), Message(
        "assistant", text, split_observations(text)))), tokenizer)
        for i, text in enumerate(synthetic_coa_texts(8, seed=3))]
    (pack,) = pack_samples(samples, sum(len(s) for s in samples))
    batch = pack_to_batch(pack, DEVICE)
    results = {}
    for name, model, dtype in (("fp32", reference, torch.float32), ("bf16", low, torch.bfloat16)):
        set_attention(model, "varlen")
        model.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, dtype=dtype, enabled=dtype != torch.float32):
            loss = loss_sum(model, batch, chunked=True) / pack.num_trained
        loss.backward()
        assert all(p.dtype == torch.float32 for p in model.parameters())
        results[name] = (loss.item(), _flat_grads(model))
    (ref_loss, ref_grad), (low_loss, low_grad) = results["fp32"], results["bf16"]
    assert low_loss == pytest.approx(ref_loss, rel=LOSS_RTOL)
    cosine = float(torch.nn.functional.cosine_similarity(ref_grad, low_grad, dim=0))
    ratio = float(low_grad.norm() / ref_grad.norm())
    assert cosine > GRAD_COSINE and 0.95 < ratio < 1.05, (cosine, ratio)


def _sft_config(data, out, precision: str, **book):
    from trainers.sft import load_config

    return load_config(values={
        "model": {"path": "tiny", "tiny": {"vocab_size": 512, "hidden_size": 128, "layers": 2,
                                           "heads": 4, "kv_heads": 2}},
        "data": {"train_path": str(data), "max_seq_len": 512, "pack_len": 2048},
        "optim": {"precision": precision, "max_steps": 8, "learning_rate": 3e-3,
                  "warmup_steps": 0},
        "resources": {"device": DEVICE},
        "bookkeeping": {"output_dir": str(out), "progress": False, "tensorboard": False,
                        "seed": 3, **book}})


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("sft") / "sft.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _sft_rows(64, seed=4)), encoding="utf-8")
    return path


def test_bf16_sft_run_follows_the_fp32_loss_curve(sft_data, tmp_path):
    """Eight optimiser steps at lr 3e-3: every step's loss within CURVE_RTOL of fp32's, and the
    loss really falls (an update lost to bf16 rounding would leave the curve behind)."""
    from trainers.sft import train

    fp32 = train(_sft_config(sft_data, tmp_path / "fp32", "fp32"))
    bf16 = train(_sft_config(sft_data, tmp_path / "bf16", "bf16"))
    assert fp32.steps == bf16.steps == 8
    assert fp32.losses[-1] < 0.9 * fp32.losses[0]
    for step, (a, b) in enumerate(zip(fp32.losses, bf16.losses, strict=True)):
        assert b == pytest.approx(a, rel=CURVE_RTOL), f"step {step + 1}: fp32 {a:.4f} bf16 {b:.4f}"


def test_sft_checkpoint_resumes_on_cuda(sft_data, tmp_path):
    """A run stopped at step 4 and resumed from its checkpoint continues as the straight run:
    weights, AdamW moments (on the device) and the data position come back. CUDA's backward
    kernels may sum in another order between processes, so losses match to 1e-4, not bits."""
    from trainers.sft import train

    straight = train(_sft_config(sft_data, tmp_path / "a", "bf16"))
    first = train(_sft_config(sft_data, tmp_path / "b", "bf16", halt_at_step=4))
    assert first.halted and (tmp_path / "b" / "checkpoint-4" / "COMPLETE").exists()
    resumed = train(_sft_config(sft_data, tmp_path / "b", "bf16", resume="latest"))
    assert resumed.losses == pytest.approx(straight.losses[4:], rel=1e-4, abs=1e-5)
    assert resumed.final_dir is not None


# -- RL learner ---------------------------------------------------------------------------


def _rl_config(**overrides):
    from trainers.common import deep_merge
    from trainers.rl.config import load_config

    base = {"algorithm": {"name": "dapo", "prompts_per_step": 2, "group_size": 4,
                          "minibatch_size": 8, "lr": 1e-5},
            "model": {"path": "tiny", "config_overrides": {"hidden_size": 128, "layers": 2}},
            "resources": {"use_ray": False, "micro_batch_size": 4, "num_gpus": 1,
                          "learner_gpus": 1}}
    return load_config(values=deep_merge(base, overrides))


def _rl_batch(vocab: int, episodes: int = 8, seed: int = 1, group: int = 4):
    from trainers.rl.synthetic import random_batch

    return random_batch(vocab, episodes, seed=seed, group=group, prompt_len=12,
                        generated_len=lambda i, turn: 6 + (i + turn) % 5, observation_len=5)


def test_bf16_rl_learner_step_matches_the_fp32_reference():
    """One DAPO update on the GPU at lr 1e-5: the bf16 learner (fp32 masters, autocast) moves
    the weights in the fp32 learner's direction by the same amount; at this lr a pure-bf16
    weight step would round away (a weight of 0.02 has a bf16 spacing of ~1e-4)."""
    from trainers.rl.learner import Learner

    moved = {}
    for dtype in ("float32", "bfloat16"):
        learner = Learner(_rl_config(**{"model.dtype": dtype}))
        assert learner.device.type == DEVICE
        batch = _rl_batch(learner.policy.config.vocab_size)
        before = {n: p.detach().float().clone() for n, p in learner.policy.named_parameters()}
        prepared, _ = learner.prepare(batch)
        learner.update(prepared)
        moved[dtype] = torch.cat([(p.detach().float() - before[n]).flatten()
                                  for n, p in learner.policy.named_parameters()])
        assert all(p.dtype == torch.float32 for p in learner.policy.parameters())
    cosine = float(torch.nn.functional.cosine_similarity(moved["float32"], moved["bfloat16"],
                                                         dim=0))
    ratio = float(moved["bfloat16"].norm() / moved["float32"].norm())
    assert cosine > 0.95 and 0.9 < ratio < 1.1, (cosine, ratio)


def _loop_config(out, **overrides):
    from trainers.common import deep_merge
    from trainers.rl.config import load_config

    base = {"algorithm": {"name": "dapo", "total_steps": 4, "prompts_per_step": 2,
                          "group_size": 2, "minibatch_size": 4, "lr": 1e-3,
                          "dynamic_sampling": False, "entropy_coef": 0.01},
            "model": {"path": "tiny", "config_overrides": {"hidden_size": 64, "layers": 2},
                      "dtype": "bfloat16"},
            "env": {"id": "coa/SynthHop-v0", "max_turns": 2, "kwargs": {
                "task_options": {"difficulty": "easy", "num_tasks": 16},
                "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}}}},
            "rollout": {"max_new_tokens": 8, "max_response_tokens": 48},
            "resources": {"use_ray": False, "micro_batch_size": 2, "num_gpus": 1,
                          "learner_gpus": 0.5, "rollout_gpus_per_worker": 0.5},
            "bookkeeping": {"save_every": 2, "output_dir": str(out), "tensorboard": False,
                            "plot": False, "eval_every": 0}}
    return load_config(values=deep_merge(base, overrides))


def test_rl_loop_on_cuda_checkpoints_and_resumes(tmp_path):
    """The whole loop on the device (hf engine rollouts and the bf16 learner on one GPU):
    engine and learner log-probs agree, and a run stopped at step 2 and resumed ends where the
    straight run ends (to bf16 rounding: CUDA kernels need not sum in the same order)."""
    from safetensors.torch import load_file

    from trainers.rl.loop import train

    last = train(_loop_config(tmp_path / "straight"))
    assert last["perf/rollout_tokens_per_s"] > 0 and last["perf/learner_tokens_per_s"] > 0
    assert last["mismatch/logprob_abs_diff"] < 5e-2  # bf16 engine vs fp32-master learner
    train(_loop_config(tmp_path / "cut"), stop_after=2)
    assert (tmp_path / "cut" / "checkpoint-2").exists()
    assert not (tmp_path / "cut" / "final").exists()
    train(_loop_config(tmp_path / "cut", **{"bookkeeping.resume": "latest"}))
    steps = [json.loads(line)["step"]
             for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [s for s in steps if s > 0] == [1, 2, 3, 4]

    def weights(directory):
        state = {}
        for path in sorted(directory.glob("*.safetensors")):
            state.update(load_file(str(path)))
        return state

    a, b = weights(tmp_path / "straight" / "final"), weights(tmp_path / "cut" / "final")
    assert a and a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key].float(), b[key].float(), atol=2e-2), key


# -- hf engine ----------------------------------------------------------------------------


def _prompt(tokenizer, question: str) -> list[int]:
    messages = [{"role": "system", "content": "Answer with tagged blocks."},
                {"role": "user", "content": question}]
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                              tokenize=True, return_dict=False))


@pytest.fixture(scope="module")
def cuda_model(tokenizer):
    from agents.tiny import build_tiny_model

    torch.manual_seed(0)
    return build_tiny_model(tokenizer, hidden_size=128, layers=2).to(DEVICE).eval()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_engine_continuous_batching_on_cuda_is_token_exact(tokenizer, cuda_model, dtype):
    """Rows joining a running batch (a resumed row with stored keys/values, a long and a short
    fresh row) sample exactly the ids they sample alone, and the log-probs the engine reports
    are those of one full forward over the result (what the RL learner recomputes)."""
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.hf import HFEngine

    model = copy.deepcopy(cuda_model).to(getattr(torch, dtype))
    engine = HFEngine(model, tokenizer, device=DEVICE, dtype=dtype)
    assert engine.continuous
    params = [SamplingParams(max_new_tokens=n, temperature=0.8, seed=s, stop=())
              for s, n in ((5, 12), (6, 16), (7, 4), (8, 9))]
    first = _prompt(tokenizer, "Who founded Bafurk Foundry?")
    (turn,) = engine.generate([GenerationRequest(token_ids=tuple(first), params=params[0])],
                              SamplingParams())
    resumed = first + list(turn.token_ids) + tokenizer.encode("\n<observation>\nOslo\n"
                                                              "</observation>\n\n")
    prompts = [resumed, _prompt(tokenizer, "Which river runs through the capital of the country "
                                           "where the founder of Bafurk was born?"),
               tokenizer.encode("<|im_start|>assistant\n")]
    requests = [GenerationRequest(token_ids=tuple(p), params=q)
                for p, q in zip(prompts, params[1:], strict=True)]
    together = engine.generate(requests, SamplingParams())
    assert together[0].usage["cached_tokens"] > 0
    alone = HFEngine(model, tokenizer, device=DEVICE, dtype=dtype, kv_cache_bytes=0)
    atol = 1e-4 if dtype == "float32" else 5e-2
    for request, batched in zip(requests, together, strict=True):
        assert batched.ok, batched.error
        (single,) = alone.generate([request], SamplingParams())
        assert batched.token_ids == single.token_ids
        assert batched.logprobs == pytest.approx(single.logprobs, abs=atol)
        ids = torch.tensor([list(request.token_ids) + list(batched.token_ids)], device=DEVICE)
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        logp = torch.log_softmax(logits / 0.8, -1)
        start = len(request.token_ids)
        full = [logp[start + k - 1, t].item() for k, t in enumerate(batched.token_ids)]
        assert batched.logprobs == pytest.approx(full, abs=atol)
    assert [len(c.token_ids) for c in together] == [16, 4, 9]


def test_batching_engine_admits_mid_decode_on_cuda(tokenizer, cuda_model):
    """Continuous batching on the device: a request sent while another decodes joins the
    running batch, finishes first, and samples what it samples alone."""
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.hf import HFEngine
    from tests.batching_scenario import short_request_mid_decode

    short = GenerationRequest(token_ids=tuple(_prompt(tokenizer, "Hi?")),
                              params=SamplingParams(max_new_tokens=4, temperature=0.8, seed=3, stop=()))
    run = short_request_mid_decode(lambda: HFEngine(cuda_model, tokenizer, device=DEVICE), short,
                                   _prompt(tokenizer, "Who founded Bafurk?"),
                                   SamplingParams(max_new_tokens=80, temperature=0.8, seed=4, stop=()))
    assert len(run["long"].token_ids) == 80 and run["finished"] == ["short", "long"]
    assert run["short"].token_ids == run["alone"].token_ids
