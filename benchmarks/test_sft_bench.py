"""SFT tokens/s on CPU: our trainer vs TRL's ``SFTTrainer``, and packed vs one sample per row.

Same model (a tiny Qwen2-shaped Llama, random weights), same data (SynthHop oracle
trajectories tokenised once with our span-exact masking; TRL gets the very ids and labels),
same optimiser and schedule, one packed row of 1024 tokens per step, one CPU thread (the
shared 2-core CI machine makes two threads slower and noisier). Throughput is steady state
(after the first 3 steps). The baselines run in the same session; the figures are ratios.

    python3 -m pytest benchmarks/test_sft_bench.py -s -p no:cacheprovider
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the SFT trainer needs torch (extra: train)")

from benchmarks.gpu_sft import make_data, make_model_dir, run_ours, run_trl

STEPS, WARMUP, PACK_LEN = 30, 3, 1024
_results: dict[str, float] = {}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    work = tmp_path_factory.mktemp("sft_bench")
    data_path, tokenizer, tokenized = make_data(work, 200, vocab_size=2048)
    return work, data_path, tokenized, make_model_dir(work / "model", tokenizer, "tiny")


def _ours(setup, name: str, packing: bool) -> dict:
    work, data_path, _, model_dir = setup
    return run_ours(model_dir, data_path, work / name, steps=STEPS, pack_len=PACK_LEN,
                    device="cpu", precision="fp32", warmup=WARMUP, packing=packing, threads=1)


def _record(benchmark, name: str, result: dict) -> None:
    _results[name] = result["tokens_per_s"]
    benchmark.extra_info.update({f"{name}_tokens_per_s": round(result["tokens_per_s"], 1),
                                 f"{name}_final_loss": round(result["final_loss"], 4)})
    print(f"\n{name}: {result['tokens_per_s']:,.0f} tokens/s over {result['steps']} steps")


def test_sft_ours_packed(benchmark, setup):
    result = benchmark.pedantic(_ours, args=(setup, "ours", True), rounds=1, iterations=1)
    _record(benchmark, "ours_packed", result)


def test_sft_baseline_trl_sfttrainer(benchmark, setup):
    pytest.importorskip("trl", reason="trl (the `bench` extra) is not installed")
    import torch

    work, _, tokenized, model_dir = setup
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = benchmark.pedantic(
            run_trl, args=(model_dir, tokenized, work / "trl"),
            kwargs={"steps": STEPS, "pack_len": PACK_LEN, "device": "cpu", "bf16": False,
                    "warmup": WARMUP}, rounds=1, iterations=1)
    finally:
        torch.set_num_threads(threads)
    _record(benchmark, "trl", result)
    if "ours_packed" in _results:
        ratio = _results["ours_packed"] / _results["trl"]
        benchmark.extra_info["ours_vs_trl"] = round(ratio, 3)
        print(f"ours / TRL SFTTrainer tokens/s: {ratio:.2f}x")


def test_sft_baseline_ours_unpacked(benchmark, setup):
    result = benchmark.pedantic(_ours, args=(setup, "unpacked", False), rounds=1, iterations=1)
    _record(benchmark, "ours_unpacked", result)
    if "ours_packed" in _results:
        ratio = _results["ours_packed"] / _results["ours_unpacked"]
        benchmark.extra_info["packed_vs_unpacked"] = round(ratio, 3)
        print(f"packed / one sample per row tokens/s: {ratio:.2f}x")
