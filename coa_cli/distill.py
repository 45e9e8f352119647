"""``coa distill RUN... --out FILE [--sharegpt FILE]``: teacher runs in, SFT data out.

A teacher is played with ``coa teach ENV --system SYSTEM.yaml --out DIR`` (a multi-agent
system) or ``coa eval ENV --agent … --out DIR`` (any single agent); this command converts
teacher runs into single-model CoA trajectories and filters everything stage by stage (see
:mod:`trainers.distill.pipeline`), replaying each survivor through a fresh env. It prints how
many trajectories survive each stage and writes the data (trajectory JSONL, which
``coa train sft`` reads with ``train_path: FILE``; ``--sharegpt`` adds the seed's
LLaMA-Factory format) with the report beside it as ``FILE.report.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["distill_command"]


def _print_funnel(report: object) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="distillation: survivors per stage")
    for column in ("stage", "in", "out", "dropped"):
        table.add_column(column)
    for stage in report.stages:  # type: ignore[attr-defined]
        reasons = ", ".join(f"{why} {count}" for why, count in stage["dropped"].items())
        table.add_row(stage["stage"], str(stage["in"]), str(stage["out"]), reasons)
    Console().print(table)


def distill_command(
    runs: list[Path] = typer.Argument(..., help="`coa teach`/`coa eval` output directories or trajectory JSONL files."),
    out: Path = typer.Option(..., "--out", "-o", help="SFT data file to write (trajectory JSONL)."),
    sharegpt: Path | None = typer.Option(None, help="Also write the kept trajectories here in the seed's "
                                                    "ShareGPT SFT format."),
    min_reward: float = typer.Option(1.0, help="Keep episodes whose reward is at least this."),
    allow_bad_actions: bool = typer.Option(False, help="Keep episodes with a malformed action the env corrected."),
    leak_check: bool = typer.Option(True, help="Drop answers given away by the question or metadata, or written "
                                               "before any observation showed them (retrieval envs)."),
    max_turns: int = typer.Option(26, help="Drop trajectories with more actions (0 = no limit)."),
    max_chars: int = typer.Option(131_072, help="Drop trajectories with longer responses (0 = no limit)."),
    min_tools: int = typer.Option(1, help="Distinct tools a trajectory must call."),
    min_roles: int = typer.Option(1, help="Distinct role spans (think, plan, reflection, ...) it must write."),
    replay: bool = typer.Option(True, help="Replay each candidate through a fresh env; keep it only if the "
                                           "observations and reward match."),
    env_kwargs: str | None = typer.Option(None, help="gym.make options (JSON object) for replaying records that "
                                                     "carry none (coa eval runs made with --data etc.)."),
    max_per_task: int = typer.Option(1, help="Kept episodes per task (0 = all distinct ones)."),
    budget: int = typer.Option(0, help="Kept episodes in all (0 = no cap)."),
    prefer: str = typer.Option("quality", help="Which to keep under the caps: quality (reflection and error "
                                               "correction first) | shortest | first."),
    keep_token_ids: bool = typer.Option(False, help="Keep the teacher's token ids (only if the student shares its "
                                        "tokenizer; otherwise the text is re-tokenised)."),
) -> None:
    """Convert, filter and replay teacher episodes; write SFT data plus a per-stage report."""
    from trainers.distill import DistillConfig, distill

    try:
        make_kwargs = json.loads(env_kwargs) if env_kwargs else {}
        if not isinstance(make_kwargs, dict):
            raise ValueError("--env-kwargs must be a JSON object")
        config = DistillConfig(min_reward=min_reward, allow_bad_actions=allow_bad_actions, leak_check=leak_check,
                               max_turns=max_turns, max_chars=max_chars, min_tools=min_tools, min_roles=min_roles,
                               replay=replay, make_kwargs=make_kwargs, max_per_task=max_per_task, budget=budget,
                               prefer=prefer, keep_token_ids=keep_token_ids)
        report = distill(runs, out, config, sharegpt_out=sharegpt)
    except (FileNotFoundError, ValueError) as error:
        raise typer.BadParameter(str(error)) from error
    _print_funnel(report)
    for error in report.errors[:5]:
        typer.echo(f"note: {error}", err=True)
    typer.echo(f"kept {report.kept} of {report.read} episodes ({report.tasks_kept} of {report.tasks_seen} tasks) "
               f"-> {out}" + (f" and {sharegpt}" if sharegpt else ""))
