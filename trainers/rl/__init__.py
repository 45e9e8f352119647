"""Agentic RL over the CoA envs: PPO, GRPO and DAPO as one loop, algorithm as config.

Layout (each module one job): ``config``/``sections`` (the sectioned config, presets;
loaded, checkpointed and logged by the shared ``trainers.common``), ``algorithms``
(advantages and losses as tensor functions), ``batch`` (trajectories to tensors),
``shaping`` (the training reward: the env's terms plus DAPO's overlong term),
``models``/``learner``/``optim`` (policy, critic, reference, the update; fp32 masters,
clipping, LR schedule), ``rollout`` (episode generation inside a worker), ``actors`` (Ray
placement and fault tolerance), ``metrics`` (episode statistics, the reward curve), and
``loop`` (the story top to bottom). Importing this package is light: torch, transformers
and ray load inside the functions that need them.
"""

from trainers.rl.config import ConfigError, RLConfig, load_config

__all__ = ["ConfigError", "RLConfig", "load_config", "train"]


def train(config: RLConfig) -> dict:
    """Run RL training as configured: the SFT warm start first when ``model.warm_start`` asks
    for one (``trainers.rl.warmstart``), then the loop from its model; returns the final
    step's metrics."""
    from trainers.rl.loop import train as _train
    from trainers.rl.warmstart import warm_started

    return _train(warm_started(config))
