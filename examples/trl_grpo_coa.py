"""Train with TRL's GRPOTrainer on a coa env (multi-turn CoA episodes through its rollout_func).

    python examples/trl_grpo_coa.py                    # tiny model, SFT warm start, 4 GRPO steps on CPU
    python examples/trl_grpo_coa.py --model DIR --env coa/NQ-v1 --steps 100 --no-warm-start

Each prompt of a GRPO group is a whole episode in the env (tools run for real, observations
masked out of the loss), scored by the env's own reward.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="coa/SynthHop-v1")
    parser.add_argument("--env-url", default=None, help="step the env in a `coa serve-env` server")
    parser.add_argument("--model", default=None, help="HF model dir (default: a warm-started tiny model)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", default="runs/trl_grpo")
    parser.add_argument("--no-warm-start", action="store_true")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.adapters.demo import SYNTHHOP_DEMO, grpo_demo, tiny_warm_start
    from trainers.adapters.trl_grpo import CoARollout

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    env_kwargs = SYNTHHOP_DEMO if args.env.startswith("coa/SynthHop-") else {}
    if args.model:
        tokenizer, model = AutoTokenizer.from_pretrained(args.model), AutoModelForCausalLM.from_pretrained(args.model)
    elif args.no_warm_start:
        from agents.tiny import build_tiny_model, train_tiny_tokenizer

        tokenizer = train_tiny_tokenizer()
        model = build_tiny_model(tokenizer, hidden_size=64, layers=2)
    else:
        from agents.tiny import load_tiny

        tokenizer, model = load_tiny(tiny_warm_start(args.out, args.env, env_kwargs))
    rollout = CoARollout(args.env, env_kwargs=env_kwargs, env_url=args.env_url, max_new_tokens=32)
    grpo_demo(model, tokenizer, rollout, args.out, args.steps)
    rollout.close()


if __name__ == "__main__":
    main()
