"""RL step throughput on the GPU path: rollout tokens/s, learner MFU and the step time split.

A script for a GPU machine that runs on CPU too, so only the device differs:

    python benchmarks/gpu_rl.py --config examples/rl_gpu_0p5b_dapo.yaml --steps 8
    python benchmarks/gpu_rl.py --config examples/rl_gpu_7b_fsdp.yaml --steps 6 \\
        --address HEAD:6379 --gpus 8
    python benchmarks/gpu_rl.py --config examples/rl_tiny_dapo.yaml --steps 3 \\
        --peak-tflops 0.1 resources.torch_threads=1                    # CPU smoke run

It runs the real loop (``trainers.rl.loop.train``: rollouts, env tools, learner, weight
sync) for ``--steps`` steps into a temporary directory and reads ``metrics.jsonl``; the first
``--warmup-steps`` steps (model load, compilation, allocator growth) are left out and every
figure is the median over the remaining steps, with min and max.

* rollout tokens/s: ``perf/rollout_tokens_per_s`` (generated tokens over generation time);
* learner tokens/s: ``perf/learner_tokens_per_s`` (attended tokens x PPO epochs over the
  learner's prepare + update time);
* learner MFU: model FLOPs over the learner time against ``--peak-tflops`` x ``--gpus``
  (H100 SXM bf16 dense: 989 TFLOP/s each). FLOPs per attended token: ``6 N`` per PPO epoch
  plus ``2 N`` per no-grad forward in prepare (the policy's recompute, and the reference and
  a separate critic when the config has them), ``N`` the policy's parameters. Attention
  FLOPs are left out, so the MFU is a lower bound;
* the step split: median seconds of generation, waiting on env tools, reference/critic
  passes, the learner and the whole step.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

SPLIT = ("time/generation_s", "time/env_blocking_s", "time/ref_critic_s", "time/learner_s",
         "time/rollout_s", "time/step_s")


def policy_parameters(model_dir: Path) -> int:
    """Parameters of the saved policy, counted on the meta device (nothing allocated)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(steps: list[dict[str, Any]], params: int, forwards: int, epochs: int,
              peak_tflops: float, gpus: int, warmup: int) -> dict[str, Any]:
    """The figures above from the per-step metrics of one run."""
    kept = [m for m in steps if m.get("step", 0) > warmup] or steps
    out: dict[str, Any] = {"steps_measured": len(kept), "policy_parameters": params}
    for key in ("perf/rollout_tokens_per_s", "perf/learner_tokens_per_s"):
        values = [m[key] for m in kept if key in m]
        if values:
            out[key.split("/")[1]] = _spread(values)
    flops_per_token = params * (6 * epochs + 2 * forwards)
    mfu = [m["perf/learner_tokens_per_s"] / epochs * flops_per_token
           / (peak_tflops * 1e12 * gpus) for m in kept if "perf/learner_tokens_per_s" in m]
    if mfu:
        out["learner_mfu"] = _spread(mfu)
    out["step_split_s"] = {key.split("/")[1]: statistics.median([m[key] for m in kept])
                           for key in SPLIT if all(key in m for m in kept)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="an RL YAML (examples/rl_*.yaml)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup-steps", type=int, default=1)
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="peak dense TFLOP/s of one device in the learner's dtype")
    parser.add_argument("--gpus", type=int, default=None,
                        help="devices the learner uses (default: learner_workers)")
    parser.add_argument("--address", default=None, help="Ray cluster to join")
    parser.add_argument("overrides", nargs="*", help="section.key=value")
    args = parser.parse_args(argv)

    from trainers.rl import train  # the warm start (when configured), then the loop
    from trainers.rl.config import load_config

    with tempfile.TemporaryDirectory(prefix="coa-gpu-rl-") as tmp:
        extra = [*args.overrides, f"algorithm.total_steps={args.steps}",
                 f"bookkeeping.output_dir={tmp}", "bookkeeping.save_every=0",
                 "bookkeeping.eval_every=0", "bookkeeping.plot=false",
                 "bookkeeping.tensorboard=false"]
        if args.address:
            extra.append(f"resources.ray_address={args.address}")
        config = load_config(Path(args.config), extra)
        train(config)
        steps = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text()
                 .splitlines()]
        params = policy_parameters(Path(tmp) / "final")
    forwards = 1 + int(config.uses_reference) + int(config.algorithm.critic == "separate")
    result = summarise(steps, params, forwards, config.algorithm.ppo_epochs, args.peak_tflops,
                       args.gpus or config.resources.learner_workers, args.warmup_steps)
    result.update({"config": args.config, "overrides": args.overrides,
                   "learner_strategy": config.resources.learner_strategy,
                   "rollout_engine": config.rollout.engine, "dtype": config.model.dtype})
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
