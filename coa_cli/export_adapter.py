"""``coa export-adapter TUNED --base BASE --rank R --out DIR``: a fine-tuned model as a small adapter.

Factors ``TUNED - BASE`` layer by layer into a peft LoRA adapter of rank R (see
:mod:`trainers.lowrank`), writes it with ``extraction.json`` (energy kept per layer, deltas an
adapter cannot hold, next-token KL on probe texts) and prints what it kept. ``TUNED`` may be a
full model directory or a LoRA adapter directory (an RL run's ``final/``), merged first; the
adapter loads anywhere with ``coa eval --model DIR`` (its base is named inside it).
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["export_adapter_command"]


def export_adapter_command(
    tuned: str = typer.Argument(..., help="The fine-tuned model: a directory (full weights or a peft "
                                          "adapter) or a catalogue name."),
    base: str = typer.Option(..., help="The model it was tuned from (a catalogue name stays a name in "
                                       "the adapter, e.g. smollm2-135m)."),
    out: Path = typer.Option(..., "--out", "-o", help="Adapter directory to write."),
    rank: int = typer.Option(8, help="Adapter rank (SVD directions kept per layer)."),
    dtype: str = typer.Option("float16", help="float16 | bfloat16 | float32 for the saved factors."),
) -> None:
    """Extract TUNED - BASE as a rank-R LoRA adapter and report what it kept."""
    from trainers.lowrank import extract_adapter

    try:
        report = extract_adapter(tuned, base, out, rank=rank, dtype=dtype)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    typer.echo(f"wrote {out}: rank {report.rank} on {report.modules} layers, {report.adapter_bytes / 1e6:.2f} MB "
               f"({report.dtype}); delta energy kept {report.energy_kept:.4f} (lowest layer "
               f"{report.energy_kept_min:.4f}); next-token KL {report.probe_kl:.2e}, top-1 agreement "
               f"{report.probe_top1_agreement:.3f}")
    if report.dropped_delta_norm:
        worst = max(report.dropped_delta_norm.items(), key=lambda kv: kv[1])
        typer.echo(f"not in the adapter: {len(report.dropped_delta_norm)} changed non-linear parameters "
                   f"(largest relative change {worst[0]}: {worst[1]:.2e})", err=True)
