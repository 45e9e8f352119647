"""SFT throughput and MFU: our trainer vs TRL's ``SFTTrainer`` on the same model and data.

A script for the GPU machine (also runs on CPU with a small model; the CPU benchmark
``benchmarks/test_sft_bench.py`` calls the same functions):

    python benchmarks/gpu_sft.py --steps 30 --pack-len 8192            # H100, ~0.5B, bf16
    python benchmarks/gpu_sft.py --device cpu --preset tiny --steps 20 --pack-len 1024

Model: Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate
4864, biased q/k/v, tied 151,936-token vocabulary: ~494M parameters) with random weights, so
nothing is downloaded. Data: oracle trajectories of ``coa/SynthHop-v0`` (real env, real
search tool), tokenised once with our span-exact masking; TRL gets those very ids and labels
(``input_ids`` + ``labels`` columns), so both train on the same tokens with the same loss mask.
Both pack rows of ``--pack-len`` tokens without padding (ours: first-fit-decreasing with
per-sample attention; TRL: best-fit-decreasing, padding-free, position ids reset per sample),
batch one row per step, AdamW, cosine schedule, fp32 master weights under bf16 autocast.

Throughput is steady state: tokens between the end of step ``--warmup-steps`` and the last
step over the time between them (CUDA synchronised at step ends). MFU uses the standard
model-FLOPs count per token, ``6 * N + 6 * L * d * s_mean`` (N all parameters including the
LM head; causal attention over each sample's own length), against ``--peak-tflops`` (H100
SXM bf16 dense: 989). Ours computes the LM head only where a label exists: in ``ours_mfu``
that saving counts as speed (both arms are credited the full head); ``ours_hfu_executed``
counts only the FLOPs ours ran (head on the trained share of positions), so the two bracket
how busy the hardware really was. Prints one JSON object.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from gpu_device import device_name, device_parser, is_cuda, require_device, synchronize

PRESETS: dict[str, dict[str, int]] = {
    # Qwen2.5-0.5B's shape.
    "qwen0.5b": {"vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
                 "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864},
    # A CPU-sized model of the same family, for the CPU benchmark and smoke runs.
    "tiny": {"vocab_size": 2048, "hidden_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256},
}


def make_data(directory: Path, n: int, vocab_size: int) -> tuple[Path, Any, list[Any]]:
    """SynthHop oracle trajectories -> (JSONL path, tokenizer, tokenised samples)."""
    from agents.tiny import train_tiny_tokenizer
    from trainers.data import load_samples, tokenize_sample
    from trainers.data.generate import generate_trajectories

    path = generate_trajectories("coa/SynthHop-v0", directory / "synthhop_oracle.jsonl", n,
                                 task_options={"num_tasks": n, "split": "train"})
    samples = load_samples(path)
    tokenizer = train_tiny_tokenizer([t for s in samples for t in s.texts()],
                                     vocab_size=vocab_size)
    return path, tokenizer, [tokenize_sample(s, tokenizer) for s in samples]


def make_model_dir(directory: Path, tokenizer: Any, preset: str, seed: int = 0) -> Path:
    """A random-weight Qwen2-shaped model (fp32) and our tokenizer, saved offline.

    The class is Llama with biased attention projections (Qwen2's layout): a directory whose
    config says ``qwen2`` makes transformers reload *our* tokenizer as Qwen's (see
    ``agents.tiny``), which would tokenise the data differently from TRL's copy.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agents.tiny import save_tiny

    sizes = dict(PRESETS[preset])
    sizes["vocab_size"] = max(sizes["vocab_size"], len(tokenizer))
    config = LlamaConfig(**sizes, max_position_embeddings=32768, tie_word_embeddings=True,
                         attention_bias=True, rope_theta=1e6, rms_norm_eps=1e-6,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None, use_cache=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    return save_tiny(directory, tokenizer, model)


def flops_per_token(model_dir: Path, tokenized: list[Any], head_share: float = 1.0) -> float:
    """``6 N + 6 L d s_mean``: dense matmuls plus causal attention within each sample.

    ``head_share`` scales the LM head's ``6 V d``: 1 is the standard model-FLOPs count (what
    MFU is quoted in, and what TRL executes); the share of trained positions gives the FLOPs
    our trainer executes, since it runs the head only where a label exists.
    """
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    d, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    kv = config.num_key_value_heads * (d // config.num_attention_heads)
    per_layer = d * d * 2 + d * kv * 2 + 3 * d * config.intermediate_size
    body = layers * per_layer  # the tied head is counted once, used once per token
    lengths = [len(t) for t in tokenized]
    # causal attention: sum over samples of s^2/2 per layer, x2 (QK^T, AV) x2 (MAC) x3 (fwd+bwd)
    attention = 6 * layers * d * sum(s * s for s in lengths) / max(sum(lengths), 1)
    return 6 * body + 6 * vocab * d * head_share + attention


def _steady(points: list[tuple[float, float]], warmup: int) -> float:
    """tokens/s between step ``warmup`` and the last step from (elapsed_s, tokens) points."""
    if len(points) <= warmup + 1:
        warmup = 0
    (t0, n0), (t1, n1) = (points[warmup - 1] if warmup else (0.0, 0.0)), points[-1]
    return (n1 - n0) / max(t1 - t0, 1e-9)


def run_ours(model_dir: Path, data_path: Path, out: Path, *, steps: int, pack_len: int,
             device: str, precision: str, warmup: int, packing: bool = True,
             attention: str = "varlen", threads: int = 0, grad_ckpt: bool = False,
             compile_layers: bool = False) -> dict[str, Any]:
    from trainers.sft import load_config, train

    config = load_config(values={
        "model": {"path": str(model_dir), "attention": attention,
                  "gradient_checkpointing": grad_ckpt, "compile": compile_layers},
        "data": {"train_path": str(data_path), "max_seq_len": pack_len,
                 "pack_len": pack_len if packing else None, "packing": packing},
        "optim": {"max_steps": steps, "grad_accum": 1, "learning_rate": 1e-5,
                  "precision": precision},
        "resources": {"device": device, "torch_threads": threads},
        "bookkeeping": {"output_dir": str(out), "progress": False, "tensorboard": False,
                        "save_every": 0, "seed": 0}})
    result = train(config)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open() if '"loss"' in line]
    points = [(r["elapsed_s"], r["tokens"]) for r in rows]
    return {"tokens_per_s": _steady(points, warmup), "steps": result.steps,
            "final_loss": result.losses[-1], "tokens": points[-1][1]}


def run_trl(model_dir: Path, tokenized: list[Any], out: Path, *, steps: int, pack_len: int,
            device: str, bf16: bool, warmup: int, attention: str = "sdpa",
            grad_ckpt: bool = False) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    cuda = is_cuda(device)
    points: list[tuple[float, float]] = []

    class Timer(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            synchronize(device)
            points.append((time.perf_counter() - self.start, float(state.num_input_tokens_seen)))

    dataset = Dataset.from_dict({"input_ids": [list(t.input_ids) for t in tokenized],
                                 "labels": [list(t.labels) for t in tokenized]})
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation=attention)
    args = SFTConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=1,
                     gradient_accumulation_steps=1, learning_rate=1e-5, lr_scheduler_type="cosine",
                     warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, packing=True,
                     padding_free=True, max_length=pack_len, bf16=bf16, use_cpu=not cuda,
                     save_strategy="no", report_to="none", logging_steps=10**6, disable_tqdm=True,
                     dataloader_num_workers=0, include_num_input_tokens_seen="all",
                     gradient_checkpointing=grad_ckpt, seed=0,
                     optim="adamw_torch_fused" if cuda else "adamw_torch")
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         callbacks=[Timer()])
    output = trainer.train()
    return {"tokens_per_s": _steady(points, warmup), "steps": len(points),
            "final_loss": float(output.training_loss), "tokens": points[-1][1] if points else 0}


def main() -> None:
    parser = device_parser(__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="qwen0.5b")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--pack-len", type=int, default=8192)
    parser.add_argument("--samples", type=int, default=600)
    parser.add_argument("--tokenizer-vocab", type=int, default=512,
                        help="512 keeps SynthHop samples ~1k tokens long, like real CoA data")
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--trl-attention", default="sdpa",
                        help="attn_implementation for TRL's model (sdpa, flash_attention_2, ...)")
    parser.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing (both)")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--compile", action="store_true",
                        help="also run ours with model.compile (torch.compile per decoder layer)")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    import torch

    require_device(args.device, dry_run="--device cpu --preset tiny")
    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="coa_sft_bench_"))
    data_path, tokenizer, tokenized = make_data(work, args.samples, args.tokenizer_vocab)
    tokenized = [t for t in tokenized if len(t) <= args.pack_len]
    model_dir = make_model_dir(work / "model", tokenizer, args.preset)
    per_token = flops_per_token(model_dir, tokenized)
    trained_share = sum(t.num_trained for t in tokenized) / max(sum(len(t) for t in tokenized), 1)
    executed_per_token = flops_per_token(model_dir, tokenized, head_share=trained_share)
    result: dict[str, Any] = {
        "device": device_name(args.device),
        "preset": args.preset, "precision": args.precision, "pack_len": args.pack_len,
        "steps": args.steps, "samples": len(tokenized),
        "mean_sample_tokens": round(sum(len(t) for t in tokenized) / len(tokenized), 1),
        "gflops_per_token": round(per_token / 1e9, 3),
        "trained_token_share": round(trained_share, 3),
        "gflops_per_token_executed_ours": round(executed_per_token / 1e9, 3),
    }
    ours = run_ours(model_dir, data_path, work / "ours", steps=args.steps, pack_len=args.pack_len,
                    device=args.device, precision=args.precision, warmup=args.warmup_steps,
                    threads=args.threads, grad_ckpt=args.grad_ckpt)
    result["ours"] = ours
    peak = args.peak_tflops * 1e12
    result["ours_mfu"] = round(ours["tokens_per_s"] * per_token / peak, 4)
    # the hardware's share doing our trainer's real work (head only on trained positions)
    result["ours_hfu_executed"] = round(ours["tokens_per_s"] * executed_per_token / peak, 4)
    if args.compile:
        compiled = run_ours(model_dir, data_path, work / "ours_compiled", steps=args.steps,
                            pack_len=args.pack_len, device=args.device, precision=args.precision,
                            warmup=args.warmup_steps, threads=args.threads,
                            grad_ckpt=args.grad_ckpt, compile_layers=True)
        result["ours_compiled"] = compiled
        result["ours_compiled_mfu"] = round(compiled["tokens_per_s"] * per_token / peak, 4)
    if not args.skip_trl:
        if is_cuda(args.device):
            torch.cuda.empty_cache()
        trl = run_trl(model_dir, tokenized, work / "trl", steps=args.steps, pack_len=args.pack_len,
                      device=args.device, bf16=args.precision == "bf16", warmup=args.warmup_steps,
                      attention=args.trl_attention, grad_ckpt=args.grad_ckpt)
        result["trl"] = trl
        result["trl_mfu"] = round(trl["tokens_per_s"] * per_token / peak, 4)
        result["ours_vs_trl_tokens_per_s"] = round(ours["tokens_per_s"] / trl["tokens_per_s"], 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
