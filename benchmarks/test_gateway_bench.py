"""What the recording gateway costs per call, against in-process generation in the same run.

One engine (the hf engine behind a BatchingEngine, KV reuse off so every call prefills the
same prompt in full) answers the same chat prompt (a SynthHop question under the env's
system prompt) with the same seed and ``NEW_TOKENS`` new tokens, through three arms
interleaved call by call in every round:

* ``in_process``: ``BatchingEngine.generate`` on the prompt's ids (what the RL worker does);
* ``gateway``: the official ``openai`` client, over HTTP on 127.0.0.1, to a gateway session
  (template rendering, tokenising, the request model, recording, the JSON reply);
* ``gateway_stream``: the same, streamed (SSE chunks), timed to the last chunk.

Each arm samples the same ids (checked), so the difference is the gateway's overhead.
Reported per call: median and the spread of per-round medians; the overhead in ms and as a
ratio. Torch threads fixed (``COA_BENCH_THREADS``, default 1); rounds ``COA_BENCH_ROUNDS``
(default 5) of ``CALLS`` calls per arm. Reported, not asserted. Run as a script for JSON
(``python benchmarks/test_gateway_bench.py --model smollm2-135m --device cuda``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from typing import Any

ROUNDS = int(os.environ.get("COA_BENCH_ROUNDS", "5"))
THREADS = int(os.environ.get("COA_BENCH_THREADS", "1"))
CALLS = 4
NEW_TOKENS = 32
ARMS = ("in_process", "gateway", "gateway_stream")


def _load(model: str, device: str) -> tuple[Any, Any]:
    from agents.engines.hf import HFEngine

    if model == "tiny":
        from agents.tiny import build_tiny_model, train_tiny_tokenizer

        tokenizer = train_tiny_tokenizer()
        return HFEngine(build_tiny_model(tokenizer), tokenizer, device=device, kv_cache_bytes=0), tokenizer
    engine = HFEngine(model, device=device, kv_cache_bytes=0)
    return engine, engine.tokenizer


def _messages() -> list[dict[str, str]]:
    import gymnasium as gym

    import coa_envs  # noqa: F401

    env = gym.make("coa/SynthHop-v0")
    _, info = env.reset(options={"task_index": 3})
    return info["messages"]


def measure(model: str = "tiny", device: str = "cpu", rounds: int = ROUNDS) -> dict[str, Any]:
    """Per-call seconds of each arm (``rounds`` x ``CALLS``), interleaved; see the module doc."""
    import openai
    import torch

    from agents.engines import GenerationRequest, SamplingParams
    from agents.gateway.app import create_gateway_app
    from agents.gateway.core import Gateway
    from agents.gateway.local import LocalBackend
    from coa_envs.service.running import serve_in_thread

    torch.set_num_threads(THREADS)
    engine, tokenizer = _load(model, device)
    backend = LocalBackend(engine, tokenizer)
    messages = _messages()
    prompt = tokenizer.encode(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                              add_special_tokens=False)
    times: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
    load_before = os.getloadavg()
    with serve_in_thread(create_gateway_app(Gateway(backend, "m"))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)

        def in_process(seed: int) -> list[int]:
            params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0, stop=(), seed=seed)
            (completion,) = backend.batcher.generate([GenerationRequest(token_ids=tuple(prompt), params=params)],
                                                     params)
            return list(completion.token_ids)

        def gateway(seed: int) -> list[int]:
            reply = client.chat.completions.create(
                model="m", messages=messages, max_tokens=NEW_TOKENS, seed=seed, extra_body={"return_token_ids": True},
                extra_headers={"X-Session-Id": f"bench-{uuid.uuid4().hex}"})
            return reply.choices[0].model_extra["token_ids"]

        def gateway_stream(seed: int) -> list[int]:
            ids: list[int] = []
            for chunk in client.chat.completions.create(
                    model="m", messages=messages, max_tokens=NEW_TOKENS, seed=seed, stream=True,
                    extra_body={"return_token_ids": True}, extra_headers={"X-Session-Id": f"bench-{uuid.uuid4().hex}"}):
                ids += (chunk.choices[0].model_extra or {}).get("token_ids") or [] if chunk.choices else []
            return ids

        run = {"in_process": in_process, "gateway": gateway, "gateway_stream": gateway_stream}
        for arm in ARMS:  # warm-up: first calls load kernels, the tokenizer's caches, the HTTP pool
            run[arm](0)
        for round_index in range(rounds):
            per_round: dict[str, list[float]] = {arm: [] for arm in ARMS}
            for call in range(CALLS):
                seed = 1000 * round_index + call
                sampled = {}
                for arm in ARMS:
                    started = time.perf_counter()
                    sampled[arm] = run[arm](seed)
                    per_round[arm].append(time.perf_counter() - started)
                assert sampled["gateway"] == sampled["in_process"] == sampled["gateway_stream"], "arms diverged"
            for arm in ARMS:
                times[arm].append(per_round[arm])
    engine_name = f"{model} on {device}"
    return _summary(times, engine_name, load_before, os.getloadavg(), len(prompt))


def _summary(times: dict[str, list[list[float]]], engine: str, load_before: tuple, load_after: tuple,
             prompt_tokens: int) -> dict[str, Any]:
    out: dict[str, Any] = {"engine": engine, "prompt_tokens": prompt_tokens, "new_tokens": NEW_TOKENS,
                           "rounds": len(times["in_process"]), "calls_per_round": CALLS, "torch_threads": THREADS,
                           "load_before": [round(x, 2) for x in load_before],
                           "load_after": [round(x, 2) for x in load_after]}
    base = statistics.median(t for r in times["in_process"] for t in r)
    for arm in ARMS:
        flat = [t for r in times[arm] for t in r]
        medians = [statistics.median(r) for r in times[arm]]
        out[arm] = {"median_ms": round(1000 * statistics.median(flat), 2),
                    "round_medians_ms": [round(1000 * m, 2) for m in medians],
                    "min_ms": round(1000 * min(flat), 2), "max_ms": round(1000 * max(flat), 2)}
        if arm != "in_process":
            overheads = [1000 * (statistics.median(a) - statistics.median(b))
                         for a, b in zip(times[arm], times["in_process"], strict=True)]
            out[arm]["overhead_ms"] = round(1000 * (statistics.median(flat) - base), 2)
            out[arm]["overhead_ms_per_round"] = [round(x, 2) for x in overheads]
            out[arm]["ratio"] = round(statistics.median(flat) / base, 3)
    return out


def test_gateway_overhead_per_call(benchmark) -> None:
    import pytest

    pytest.importorskip("fastapi", reason="the gateway needs the [serve] extra")
    pytest.importorskip("openai", reason="needs the [llm] extra")
    result = benchmark.pedantic(measure, rounds=1, iterations=1)
    print("\n" + json.dumps(result, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny, a catalogue name (smollm2-135m) or a HF directory")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    arguments = parser.parse_args()
    print(json.dumps(measure(arguments.model, arguments.device, arguments.rounds), indent=2))
