"""Asynchronous vs synchronous RL on any device: episodes/s and the learner's idle share.

The CPU figures (``benchmarks/test_async_rl_bench.py``) use the real small model on 2 cores;
this script runs the same comparison for a GPU machine (or a CPU smoke run), from any RL
config, so the placement is the config's:

    python benchmarks/gpu_async_rl.py --config examples/rl_gpu_0p5b_dapo.yaml --steps 6 \\
        --tool-latency 0.5 resources.use_ray=false model.warm_start.episodes=0 \\
        algorithm.prompts_per_step=8 algorithm.minibatch_size=32 algorithm.dynamic_sampling=false
    python benchmarks/gpu_async_rl.py --config examples/rl_tiny_dapo.yaml --steps 3 \\
        --repeats 1 resources.use_ray=false resources.torch_threads=1 \\
        model.warm_start.episodes=0 algorithm.dynamic_sampling=false     # CPU smoke run

Arms ``max_staleness`` 0, 1 and 2 (the asynchronous ones with the decoupled correction) run
in turn, ``--repeats`` rounds, each the real loop for ``--steps`` steps; ``--tool-latency``
delays every env step (a remote tool). Figures over the steps after ``--warmup-steps``:
episodes/s (episodes sampled / step time), the learner's idle share (waiting for a batch /
step time), the step split (generation, learner) and the staleness reached. Prints one JSON
object; the spread is min/median/max over repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _with_latency(seconds: float) -> None:
    """Every env the rollout workers make sleeps ``seconds`` per step (this process only)."""
    import gymnasium as gym

    from trainers.rl import rollout as rollout_mod

    make = rollout_mod.make_env

    class Latency(gym.Wrapper):
        def step(self, action: Any) -> Any:
            time.sleep(seconds)
            return self.env.step(action)

    rollout_mod.make_env = lambda config, heldout=False, env_index=0: Latency(
        make(config, heldout, env_index))


def run_arm(config_path: str, overrides: list[str], staleness: int, steps: int,
            warmup: int) -> dict[str, float]:
    from trainers.rl.config import load_config
    from trainers.rl.loop import train

    with tempfile.TemporaryDirectory(prefix="coa-async-rl-") as tmp:
        extra = [*overrides, f"algorithm.total_steps={steps}", f"bookkeeping.output_dir={tmp}",
                 "bookkeeping.save_every=0", "bookkeeping.eval_every=0", "bookkeeping.plot=false",
                 "bookkeeping.tensorboard=false", f"algorithm.max_staleness={staleness}",
                 "algorithm.importance_correction=" + ("decoupled" if staleness else "behaviour")]
        train(load_config(Path(config_path), extra))
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    kept = [r for r in rows if r.get("step", 0) > warmup] or rows
    step_s = sum(r["time/step_s"] for r in kept)
    return {"episodes_per_s": sum(r["rollout/episodes"] for r in kept) / step_s,
            "learner_idle_share": sum(r["time/rollout_s"] for r in kept) / step_s,
            "step_s": statistics.median(r["time/step_s"] for r in kept),
            "generation_s": statistics.median(r.get("time/generation_s", 0.0) for r in kept),
            "learner_s": statistics.median(r.get("time/learner_s", 0.0) for r in kept),
            "staleness_max": max(r.get("async/staleness_max", 0.0) for r in kept)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup-steps", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tool-latency", type=float, default=0.0)
    parser.add_argument("overrides", nargs="*", help="section.key=value")
    args = parser.parse_args(argv)
    if args.tool_latency:
        _with_latency(args.tool_latency)
    arms: dict[int, list[dict[str, float]]] = {0: [], 1: [], 2: []}
    for _ in range(args.repeats):
        for staleness in arms:  # interleaved rounds
            arms[staleness].append(run_arm(args.config, args.overrides, staleness, args.steps,
                                           args.warmup_steps))
    base = statistics.median(r["episodes_per_s"] for r in arms[0])
    result: dict[str, Any] = {"config": args.config, "overrides": args.overrides,
                              "tool_latency_s": args.tool_latency, "steps": args.steps,
                              "repeats": args.repeats}
    for staleness, runs in arms.items():
        summary = {key: {"min": min(r[key] for r in runs),
                         "median": statistics.median(r[key] for r in runs),
                         "max": max(r[key] for r in runs)} for key in runs[0]}
        summary["speedup_vs_sync"] = summary["episodes_per_s"]["median"] / base
        result[f"max_staleness_{staleness}"] = summary
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
