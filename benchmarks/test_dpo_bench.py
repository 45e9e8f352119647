"""DPO tokens/s on CPU: our masked DPO trainer vs TRL's ``DPOTrainer``, same run.

Same model (a tiny Qwen2-shaped Llama, random weights, saved once), same pairs (synthetic CoA
trajectories from ``agents.tiny``: a chosen and a rejected answer per prompt), one epoch, beta
0.1, a frozen reference model scored every step in both (TRL's default ``ref_model=None``
copies the policy; ours ``dpo.reference: frozen``), one CPU thread. Tokens are every prompt +
response token of both sides that the arm fed its model (TRL: from its tokenised dataset;
ours: the packed rows). Our trainer packs whole pairs into rows of 2 x max_seq_len tokens;
TRL pads each batch of 4 pairs to its longest side. What differs by design: we score
generated tokens only (observation spans carry no log-prob term), TRL the whole completion.

Arms are interleaved over ``ROUNDS`` rounds; the figure is the ratio of each round's
tokens/s (median and range), because on a shared machine absolute numbers drift.

    python3 -m pytest benchmarks/test_dpo_bench.py -s -p no:cacheprovider
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the DPO trainer needs torch (extra: train)")

PAIRS, ROUNDS, BATCH, MAX_LEN = 48, 3, 4, 1024


def _pairs(work: Path) -> tuple[Path, list[dict[str, str]]]:
    """``PAIRS`` preference pairs as our pairs.jsonl and as TRL's prompt/chosen/rejected rows."""
    from agents.tiny import synthetic_coa_texts
    from agents.trajectory import Segment, Trajectory
    from trainers.data import split_observations
    from trainers.dpo import PreferencePair, write_pairs

    texts = synthetic_coa_texts(2 * PAIRS, seed=3)
    pairs, rows = [], []
    for i in range(PAIRS):
        prompt = f"Question {i}: which city is the capital of the country of river {i}?\n"
        sides = []
        for k, reward in ((2 * i, 1.0), (2 * i + 1, 0.0)):
            segments = [Segment("generated" if span.trainable else "observation", span.text)
                        for span in split_observations(texts[k])]
            sides.append(Trajectory(env_id="bench", task_id=str(i), prompt_text=prompt,
                                    segments=segments, reward=reward, sample_index=k % 2))
        pairs.append(PreferencePair(f"bench/{i}", sides[0], sides[1]))
        rows.append({"prompt": prompt, "chosen": texts[2 * i], "rejected": texts[2 * i + 1]})
    return write_pairs(work / "pairs.jsonl", pairs), rows


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from agents.tiny import save_tiny, synthetic_coa_texts, train_tiny_tokenizer

    work = tmp_path_factory.mktemp("dpo_bench")
    pairs_path, rows = _pairs(work)
    tokenizer = train_tiny_tokenizer(synthetic_coa_texts(400, seed=3), vocab_size=1024)
    model_dir = save_tiny(work / "model", tokenizer=tokenizer, hidden_size=128, layers=2,
                          heads=4, kv_heads=2, seed=0)
    return work, pairs_path, rows, model_dir


def _run_ours(setup: Any, name: str) -> dict[str, float]:
    from trainers.dpo import load_config, train

    work, pairs_path, _, model_dir = setup
    result = train(load_config(values={
        "data": {"train_path": str(pairs_path), "max_seq_len": MAX_LEN, "packing": True},
        "model": {"path": str(model_dir), "attention": "varlen"},
        "dpo": {"beta": 0.1, "reference": "frozen"},
        "optim": {"learning_rate": 1e-4, "num_epochs": 1, "grad_accum": 1},
        "resources": {"device": "cpu", "torch_threads": 1},
        "bookkeeping": {"output_dir": str(work / name), "progress": False, "tensorboard": False}}))
    return {"tokens_per_s": result.tokens_per_s, "final_loss": result.losses[-1],
            "steps": float(result.steps)}


def _run_trl(setup: Any, name: str) -> dict[str, float]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    work, _, rows, model_dir = setup
    span: dict[str, float] = {}

    class Timer(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            span["start"] = time.perf_counter()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            span["end"] = time.perf_counter()

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        args = DPOConfig(output_dir=str(work / name), per_device_train_batch_size=BATCH,
                         num_train_epochs=1, learning_rate=1e-4, beta=0.1, max_length=2 * MAX_LEN,
                         use_cpu=True, save_strategy="no", report_to="none",
                         logging_steps=10**6, disable_tqdm=True, dataloader_num_workers=0,
                         seed=0)
        trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=AutoTokenizer.from_pretrained(model_dir),
                             callbacks=[Timer()])
        output = trainer.train()
    finally:
        torch.set_num_threads(threads)
    data = trainer.train_dataset
    tokens = sum(2 * len(p) + len(c) + len(r) for p, c, r in
                 zip(data["prompt_ids"], data["chosen_ids"], data["rejected_ids"], strict=True))
    return {"tokens_per_s": tokens / (span["end"] - span["start"]),
            "final_loss": float(output.training_loss), "steps": float(output.global_step)}


def test_dpo_ours_vs_trl_dpotrainer(benchmark, setup):
    pytest.importorskip("trl", reason="trl (the `bench` extra) is not installed")
    rounds: list[dict[str, dict[str, float]]] = []

    def run_all() -> None:
        for index in range(ROUNDS):  # interleaved: both arms see the same machine load
            rounds.append({"ours": _run_ours(setup, f"ours{index}"),
                           "trl": _run_trl(setup, f"trl{index}")})

    benchmark.pedantic(run_all, rounds=1, iterations=1)
    ratios = [r["ours"]["tokens_per_s"] / r["trl"]["tokens_per_s"] for r in rounds]
    for arm in ("ours", "trl"):
        values = [r[arm]["tokens_per_s"] for r in rounds]
        benchmark.extra_info[f"{arm}_tokens_per_s_median"] = round(statistics.median(values), 1)
        print(f"\n{arm}: tokens/s per round {[round(v) for v in values]}")
    benchmark.extra_info["ours_vs_trl_median"] = round(statistics.median(ratios), 3)
    print(f"ours / TRL DPOTrainer tokens/s: median {statistics.median(ratios):.2f}x "
          f"(rounds {', '.join(f'{r:.2f}' for r in ratios)})")
