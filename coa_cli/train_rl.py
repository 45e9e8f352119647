"""``coa train rl --config FILE [key=value ...]``: the RL trainer's command.

Registered on the ``coa train`` sub-app (``coa_cli/train.py``).
"""

from __future__ import annotations

from pathlib import Path

import typer

from coa_cli.trainer_config import RESUME, config_option, load_trainer_config, overrides_argument

__all__ = ["rl_command"]

RL_CONFIG = config_option("RLConfig sections; see examples/rl_*.yaml")
RL_OVERRIDES = overrides_argument("algorithm.lr=1e-5 algorithm.name=ppo env.max_turns=4")


def rl_command(
    config: Path = RL_CONFIG,
    overrides: list[str] = RL_OVERRIDES,
    resume: bool = RESUME,
    address: str = typer.Option(None, "--address",
                                help="Ray cluster to join (host:port or 'auto'); default: "
                                     "start Ray locally."),
    no_ray: bool = typer.Option(False, "--no-ray",
                                help="Run workers and learner in this process (no Ray)."),
    output_dir: str = typer.Option(None, "--output-dir", "-o",
                                   help="Overrides bookkeeping.output_dir."),
) -> None:
    """Train a policy with PPO, GRPO or DAPO on a coa env (algorithm = config)."""
    from trainers.rl import load_config, train

    cfg = load_trainer_config(load_config, config, overrides, resume, **{
        "resources.ray_address": address or None, "resources.use_ray": "false" if no_ray else None,
        "bookkeeping.output_dir": output_dir or None})
    metrics = train(cfg)
    reward = metrics.get("rollout/reward_mean", float("nan"))
    typer.echo(f"done: {cfg.algorithm.total_steps} steps, last reward mean {reward:.3f}; "
               f"metrics, checkpoints and reward_curve.png in {cfg.bookkeeping.output_dir}")
