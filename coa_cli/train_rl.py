"""``coa train rl --config FILE [key=value ...]``: the RL trainer's command.

Registered on the ``coa train`` sub-app (``coa_cli/train.py``).
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["rl_command"]


def rl_command(
    config: Path = typer.Option(..., "--config", "-c", exists=True, dir_okay=False,
                                help="YAML file of RLConfig fields (see examples/rl_*.yaml)."),
    overrides: list[str] = typer.Argument(None, help="key=value overrides, e.g. lr=1e-5 "
                                          "algorithm=ppo env_kwargs.max_turns=4"),
    resume: bool = typer.Option(False, "--resume",
                                help="Continue from the newest checkpoint in output_dir."),
    address: str = typer.Option(None, "--address",
                                help="Ray cluster to join (host:port or 'auto'); default: "
                                     "start Ray locally."),
    no_ray: bool = typer.Option(False, "--no-ray",
                                help="Run workers and learner in this process (no Ray)."),
    output_dir: str = typer.Option(None, "--output-dir", "-o", help="Overrides output_dir."),
) -> None:
    """Train a policy with PPO, GRPO or DAPO on a coa env (algorithm = config)."""
    from trainers.rl.config import ConfigError, load_config
    from trainers.rl.loop import train

    extra = list(overrides or [])
    if resume:
        extra.append("resume=true")
    if address:
        extra.append(f"ray_address={address}")
    if no_ray:
        extra.append("use_ray=false")
    if output_dir:
        extra.append(f"output_dir={output_dir}")
    try:
        cfg = load_config(config, extra)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc
    metrics = train(cfg)
    reward = metrics.get("rollout/reward_mean", float("nan"))
    typer.echo(f"done: {cfg.total_steps} steps, last reward mean {reward:.3f}; "
               f"metrics, checkpoints and reward_curve.png in {cfg.output_dir}")
