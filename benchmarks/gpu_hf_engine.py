"""GPU throughput of the ``hf`` engine on a ~0.5B Qwen2-shaped model (a script, not a test).

Builds Qwen2.5-0.5B's architecture (hidden 896, 24 layers, 14 heads, 2 KV heads,
intermediate 4864) with random weights, so nothing is downloaded; runs batched sampling
through :class:`agents.engines.hf.HFEngine` (with the protocol's stop strings checked every
step, as in real rollouts) and, as the baseline measured in the same run,
``model.generate`` on the same prompts. Prints one JSON object.

    python benchmarks/gpu_hf_engine.py --batch 32 --prompt-len 256 --new-tokens 256

Vocabulary: 32,768 by default (``--vocab 151936`` for Qwen's real head size); prompts use
the tiny tokenizer's ids, and sampled ids beyond its vocabulary decode to nothing, which
is fine for timing. EOS is ignored so every row generates ``--new-tokens`` tokens.
"""

from __future__ import annotations

import json
import time

from gpu_device import device_name, device_parser, is_cuda, require_device, synchronize


def _decode_step_ms(model, input_ids, args) -> float:
    """Milliseconds of one bare batched decode forward (KV cache, no sampling, no engine):
    the floor under both arms' per-token time, to tell model time from loop overhead."""
    import torch

    with torch.inference_mode():
        out = model(input_ids=input_ids, use_cache=True)
        cache, step = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(3):
            out = model(input_ids=step, past_key_values=cache, use_cache=True)
        synchronize(args.device)
        began, steps = time.perf_counter(), 20
        for _ in range(steps):
            out = model(input_ids=step, past_key_values=cache, use_cache=True)
        synchronize(args.device)
    return (time.perf_counter() - began) / steps * 1e3


def main() -> None:
    parser = device_parser(__doc__, dtype="bfloat16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agents.engines import GenerationRequest, SamplingParams
    from agents.engines.hf import HFEngine
    from agents.tiny import train_tiny_tokenizer

    require_device(args.device)
    tokenizer = train_tiny_tokenizer()
    config = Qwen2Config(vocab_size=args.vocab, hidden_size=896, num_hidden_layers=args.layers,
                         num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                         max_position_embeddings=32768, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    with torch.device(args.device):
        model = Qwen2ForCausalLM(config).to(dtype)
    params_m = sum(p.numel() for p in model.parameters()) / 1e6
    engine = HFEngine(model, tokenizer, device=args.device, dtype=args.dtype,
                      max_batch_size=args.batch)
    engine.eos_ids = frozenset()  # fixed-length rows: a clean tokens/s figure

    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, len(tokenizer), (args.prompt_len,), generator=generator).tolist()
               for _ in range(args.batch)]
    requests = [GenerationRequest(token_ids=tuple(p)) for p in prompts]
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)

    engine.generate(requests[:2], SamplingParams(max_new_tokens=8))  # warm-up (kernels, cache)
    synchronize(args.device)
    if is_cuda(args.device):
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    completions = engine.generate(requests, params)
    synchronize(args.device)
    engine_s = time.perf_counter() - started
    generated = sum(len(c.token_ids) for c in completions)
    errors = [c.error for c in completions if not c.ok]

    result = {
        "device": device_name(args.device),
        "dtype": args.dtype,
        "params_m": round(params_m, 1),
        "batch": args.batch,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "engine_generated_tokens": generated,
        "engine_s": round(engine_s, 3),
        "engine_tokens_per_s": round(generated / engine_s, 1),
        "errors": errors[:3],
    }
    if is_cuda(args.device):
        result["peak_mem_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if not args.skip_baseline:
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor(prompts, device=args.device)
        mask = torch.ones_like(input_ids)
        with torch.inference_mode():
            model.generate(input_ids=input_ids[:2], attention_mask=mask[:2], max_new_tokens=8,
                           do_sample=True, pad_token_id=pad)
            synchronize(args.device)
            started = time.perf_counter()
            out = model.generate(input_ids=input_ids, attention_mask=mask,
                                 max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                 do_sample=True, temperature=1.0, pad_token_id=pad)
            synchronize(args.device)
            baseline_s = time.perf_counter() - started
        baseline_tokens = (out.shape[1] - args.prompt_len) * args.batch
        result["generate_tokens_per_s"] = round(baseline_tokens / baseline_s, 1)
        result["engine_vs_generate"] = round(result["engine_tokens_per_s"]
                                             / result["generate_tokens_per_s"], 3)
        result["forward_ms_per_decode_step"] = round(_decode_step_ms(model, input_ids, args), 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
