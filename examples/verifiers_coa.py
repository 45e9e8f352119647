"""A coa env as a verifiers (v1) environment, trained with TRL's GRPOTrainer on its episodes.

    python examples/verifiers_coa.py            # tiny model, SFT warm start, 3 GRPO steps on CPU

verifiers finds the plugin by package name (``--env.taskset.id coa_verifiers`` in its CLI);
here the env runs against the trainer's live model, served on loopback by ``coa serve``'s app.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default="runs/verifiers_grpo")
    args = parser.parse_args()

    import torch
    import verifiers.v1 as vf

    from agents.tiny import load_tiny
    from trainers.adapters.demo import SYNTHHOP_DEMO, grpo_demo, tiny_warm_start
    from trainers.adapters.verifiers_env import CoAChatHarnessConfig, CoAEnvConfig, CoATasksetConfig
    from trainers.adapters.verifiers_trl import VerifiersRollout

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    tokenizer, model = load_tiny(tiny_warm_start(args.out))
    env_config = CoAEnvConfig(
        taskset=CoATasksetConfig(env_id="coa/SynthHop-v1", env_kwargs=SYNTHHOP_DEMO),
        player=vf.AgentConfig(runtime=vf.SubprocessConfig(), max_turns=3, harness=CoAChatHarnessConfig(max_tokens=32)))
    rollout = VerifiersRollout(env_config)
    grpo_demo(model, tokenizer, rollout, args.out, args.steps)


if __name__ == "__main__":
    main()
