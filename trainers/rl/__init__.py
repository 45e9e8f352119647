"""Agentic RL over the CoA envs: PPO, GRPO and DAPO as one loop, algorithm as config.

Layout (each module one job): ``config`` (the dataclass and YAML/overrides),
``algorithms`` (advantages and losses as tensor functions), ``batch`` (trajectories to
tensors), ``models``/``learner`` (policy, critic, reference, the update), ``rollout``
(episode generation inside a worker), ``actors`` (Ray placement and fault tolerance),
``checkpoint``/``metrics``, and ``loop`` (the story top to bottom). Importing this package
is light: torch, transformers and ray load inside the functions that need them.
"""

from trainers.rl.config import ConfigError, RLConfig, apply_overrides, load_config

__all__ = ["ConfigError", "RLConfig", "apply_overrides", "load_config", "train"]


def train(config: RLConfig) -> dict:
    """Run RL training as configured; returns the final step's metrics."""
    from trainers.rl.loop import train as _train

    return _train(config)
