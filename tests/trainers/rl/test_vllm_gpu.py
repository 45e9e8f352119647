"""The vllm engine against a real vLLM on a GPU (marked gpu; skipped without vllm or CUDA).

A tiny random model is written to disk and served by vLLM. Checked: the logprobs vLLM
reports for a tempered sample equal the learner's recompute at that temperature (what the
importance ratio needs), and after ``load_weights`` the next generation of the *same* prompt
(whose KV blocks sit in the prefix cache) is scored under the new weights.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm", reason="the vllm extra is not installed (GPU-only)")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _learner_logprobs(model, prompt, completion, temperature):
    from trainers.rl.models import forward_tokens

    ids = torch.tensor([list(prompt) + list(completion.token_ids)], device="cuda")
    with torch.no_grad():
        out = forward_tokens(model, ids, torch.ones_like(ids), temperature=temperature)
    return out.logprobs[0, len(prompt) - 1:].float().cpu()


def test_vllm_logprobs_are_post_temperature_and_weights_reach_the_cached_prefix(tmp_path):
    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.vllm import VLLMEngine
    from agents.tiny import build_tiny_model, train_tiny_tokenizer

    tokenizer = train_tiny_tokenizer()
    model = build_tiny_model(tokenizer, hidden_size=64, layers=2)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    engine = VLLMEngine(str(tmp_path), dtype="float32", gpu_memory_utilization=0.2,
                        enforce_eager=True, enable_prefix_caching=True, max_model_len=512)
    if not engine.processed_logprobs:
        pytest.skip("this vLLM has no logprobs_mode; the engine returns no logprobs instead")
    prompt = tuple(range(5, 45))
    params = SamplingParams(max_new_tokens=16, temperature=0.7, stop=(), seed=3)
    first = engine.generate([GenerationRequest(token_ids=prompt, params=params)], params)[0]
    model = model.to("cuda").eval()
    expected = _learner_logprobs(model, prompt, first, 0.7)
    assert torch.allclose(torch.tensor(first.logprobs), expected, atol=2e-3)

    with torch.no_grad():  # new weights: the same prompt now scores differently
        for parameter in model.parameters():
            parameter.mul_(1.5)
    engine.load_weights({k: v.detach().cpu() for k, v in model.state_dict().items()})
    second = engine.generate([GenerationRequest(token_ids=prompt, params=params)], params)[0]
    expected = _learner_logprobs(model, prompt, second, 0.7)
    assert torch.allclose(torch.tensor(second.logprobs), expected, atol=2e-3)
