"""Agentic RL over the CoA envs: PPO, GRPO and DAPO as one loop, algorithm as config.

Layout (each module one job): ``config``/``sections``/``resources`` (the sectioned config,
presets; loaded, checkpointed and logged by the shared ``trainers.common``), ``algorithms``
(advantages, losses and off-policy weights as tensor functions), ``batch`` (trajectories to
tensors), ``shaping`` (the training reward: the env's terms plus DAPO's overlong term),
``groups`` (one step's groups: drawn, played, shaped, filtered), ``models``/``learner``/
``prepare``/``optim`` (policy, critic, reference, LoRA; the no-grad pass and the update),
``envs``/``episode_loop``/``rollout`` (episode generation inside a worker, batch or
streaming, partial rollouts), ``actors``/``learners`` (in process or Ray actors, fault
tolerance), ``streaming`` (the asynchronous batch source, bounded staleness), ``health``
(rollout-health metrics and alarms), ``metrics`` (episode statistics, the reward curve), and
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
