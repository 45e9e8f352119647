"""``coa distill RUN... --out FILE``: teacher runs in, the episodes the reward accepts out.

A teacher is played with ``coa eval ENV --agent … -k K --out DIR`` (any agent: an LLM over an
OpenAI-compatible endpoint, your own ``MODULE:NAME`` system, the oracle); this command filters
one or more such runs into SFT data (see :mod:`trainers.distill`) that ``coa train sft``
reads with ``train_path: FILE``.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["distill_command"]


def distill_command(
    runs: list[Path] = typer.Argument(..., help="`coa eval --out` directories or trajectory JSONL files."),
    out: Path = typer.Option(..., "--out", "-o", help="SFT data file to write (trajectory JSONL)."),
    min_reward: float = typer.Option(1.0, help="Keep episodes whose reward is at least this."),
    max_per_task: int = typer.Option(1, help="Accepted episodes kept per task (0 = all distinct ones)."),
    prefer: str = typer.Option("shortest", help="Which to keep when capped: shortest | first."),
    allow_bad_actions: bool = typer.Option(False, help="Keep episodes with a malformed action the env corrected."),
    keep_token_ids: bool = typer.Option(False, help="Keep the teacher's token ids (only if the student shares its "
                                        "tokenizer; otherwise the text is re-tokenised)."),
) -> None:
    """Keep the teacher episodes the reward accepts; write them as SFT data plus a report."""
    from trainers.distill import distill

    try:
        report = distill(runs, out, min_reward=min_reward, max_per_task=max_per_task, prefer=prefer,
                         allow_bad_actions=allow_bad_actions, keep_token_ids=keep_token_ids)
    except (FileNotFoundError, ValueError) as error:
        raise typer.BadParameter(str(error)) from error
    typer.echo(json.dumps(report.to_dict(), indent=2))
    typer.echo(f"kept {report.kept} of {report.read} episodes ({report.tasks_kept} of {report.tasks_seen} tasks) "
               f"-> {out}")
