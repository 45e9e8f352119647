"""The CPU demo setup the adapter examples and tests share: a small SynthHop configuration
and a tiny model briefly SFT'd on its oracle episodes (our RL warm start), so that a few
GRPO steps see groups whose rewards differ (a random tiny model never solves a task)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SYNTHHOP_DEMO", "grpo_demo", "tiny_warm_start"]

SYNTHHOP_DEMO: dict[str, Any] = {
    "task_options": {"difficulty": "easy", "num_tasks": 4},
    "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}},
    "reward": {"name": "em_f1", "metric": "f1"},  # partial credit: more groups with differing rewards
    "system_prompt": "Search the wiki, then answer.",
}


def tiny_warm_start(out: str | Path, env_id: str = "coa/SynthHop-v1", env_kwargs: dict[str, Any] | None = None,
                    max_steps: int = 80) -> Path:
    """A tiny model SFT'd on ``env_id``'s oracle episodes (~20-40 s on 2 CPU cores); returns its dir."""
    from trainers.rl.config import load_config
    from trainers.rl.warmstart import warm_start

    config = load_config(values={
        "model": {"path": "tiny", "tiny": {"hidden_size": 64, "layers": 2},
                  "warm_start": {"episodes": 24, "max_steps": max_steps, "learning_rate": 5e-3}},
        "env": {"id": env_id, "kwargs": dict(env_kwargs or SYNTHHOP_DEMO), "max_turns": 3},
        "algorithm": {"group_size": 2, "minibatch_size": 2},
        "resources": {"use_ray": False, "micro_batch_size": 2},
        "bookkeeping": {"eval_every": 0, "output_dir": str(out)}})
    path = warm_start(config)
    assert path is not None
    return path


def grpo_demo(model: Any, tokenizer: Any, rollout: Any, out: str | Path, steps: int) -> list[dict[str, float]]:
    """A few GRPO steps of TRL's trainer with ``rollout`` as its rollout_func (8 episodes a step,
    groups of 4); returns the per-step log rows and prints one line per step."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(output_dir=str(out), per_device_train_batch_size=8, num_generations=4, max_steps=steps,
                        learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=not torch.cuda.is_available(),
                        save_strategy="no", beta=0.0, max_completion_length=512)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=rollout.dataset(),
                          reward_funcs=rollout.reward, rollout_func=rollout)
    trainer.train()
    rows = [row for row in trainer.state.log_history if "loss" in row]
    for row in rows:
        print(f"step {row['step']}: loss {row['loss']:.4f} reward {row['reward']:.3f} "
              f"(std {row['reward_std']:.3f}) grad_norm {row['grad_norm']:.3f}")
    return rows
