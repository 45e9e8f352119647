"""``coa train sft|dpo|rl --config FILE [key=value ...]``: the trainers' command line.

Trainers import torch; they are imported inside each command so ``coa --help`` stays light.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from coa_cli.train_rl import rl_command
from coa_cli.trainer_config import OVERRIDES_CONTEXT, RESUME, config_option, load_trainer_config, overrides_argument

__all__ = ["train_app"]

SFT_CONFIG = config_option("see examples/sft_tiny.yaml")
SFT_OVERRIDES = overrides_argument("optim.max_steps=10 optim.learning_rate=2e-5")
DPO_CONFIG = config_option("see examples/dpo_tiny.yaml")
DPO_OVERRIDES = overrides_argument("dpo.beta=0.1 optim.max_steps=10 data.train_path=pairs.jsonl")

train_app = typer.Typer(no_args_is_help=True, add_completion=False,
                        help="Train a policy: masked SFT (sft), preference DPO (dpo) or agentic RL.")


@train_app.command("sft", context_settings=OVERRIDES_CONTEXT)
def sft_command(config: Path = SFT_CONFIG, overrides: list[str] = SFT_OVERRIDES, resume: bool = RESUME) -> None:
    """Masked SFT on CoA trajectories (loss only on model-generated tokens)."""
    from trainers.sft import load_config, train

    result = train(load_trainer_config(load_config, config, overrides, resume))
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 reports for the job
        return
    typer.echo(f"steps: {result.steps}  final loss: {result.losses[-1] if result.losses else 'n/a'}")
    if result.eval_losses:
        typer.echo(f"eval loss (generated tokens): {result.eval_losses[-1][1]:.4f}")
    typer.echo(f"data: {result.train_report.summary()}")
    typer.echo(f"tokens/s: {result.tokens_per_s:,.0f}")
    typer.echo(f"model: {result.final_dir or 'halted; resume with --resume'}")


@train_app.command("dpo", context_settings=OVERRIDES_CONTEXT)
def dpo_command(config: Path = DPO_CONFIG, overrides: list[str] = DPO_OVERRIDES, resume: bool = RESUME) -> None:
    """Masked DPO on preference pairs from `coa pairs` (log-probs of generated tokens only)."""
    from trainers.dpo import PairsError, load_config, train
    from trainers.dpo.data import PairDataError

    cfg = load_trainer_config(load_config, config, overrides, resume)
    try:
        result = train(cfg)
    except (PairsError, PairDataError) as error:
        raise typer.BadParameter(str(error), param_hint="data") from None
    if result.losses:
        typer.echo(f"steps: {result.steps}  loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}"
                   f"  reward margin {result.reward_margins[0]:.4f} -> "
                   f"{result.reward_margins[-1]:.4f}")
    if result.eval_metrics:
        last = result.eval_metrics[-1][1]
        typer.echo(f"eval: loss {last['eval/loss']:.4f}  reward accuracy "
                   f"{last['eval/rewards/accuracy']:.3f}  margin {last['eval/rewards/margin']:.4f}")
    typer.echo(f"data: {result.data_summary}")
    typer.echo(f"tokens/s: {result.tokens_per_s:,.0f}")
    typer.echo(f"model: {result.final_dir or 'halted; resume with --resume'}")


train_app.command("rl")(rl_command)
