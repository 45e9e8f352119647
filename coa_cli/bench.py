"""``coa bench``: quick speed checks of this install (see :mod:`coa_envs.bench`)."""

from __future__ import annotations

import json

import typer

__all__ = ["bench_command"]


def bench_command(
    only: str = typer.Option("protocol,env,sandbox", help="Comma-separated checks: protocol, env, sandbox."),
    seconds: float = typer.Option(1.0, help="Time spent on each timed loop of the protocol and env checks."),
    runs: int = typer.Option(40, help="Sandbox round trips to time per arm and round (sequential, paced)."),
    repeats: int = typer.Option(3, help="Interleaved rounds of the sandbox arms (the ratios' spread)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Time protocol parsing, the env step and the sandbox, each against a baseline timed now."""
    from coa_envs.bench import CHECKS

    names = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in names if name not in CHECKS]
    if unknown or not names:
        raise typer.BadParameter(f"unknown check(s) {unknown}; allowed: {list(CHECKS)}", param_hint="--only")
    warning = None
    if "sandbox" in names:
        from sandbox import unisolated_warning

        warning = unisolated_warning()
        if warning:
            typer.echo(f"WARNING: {warning}", err=True)
    results = {
        name: CHECKS[name](runs, repeats) if name == "sandbox" else CHECKS[name](seconds) for name in names
    }
    if as_json:
        typer.echo(json.dumps(results, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="coa bench (baselines timed in the same run)")
    for column in ("check", "ours", "baseline", "ratio / target"):
        table.add_column(column)
    if "protocol" in results:
        r = results["protocol"]
        table.add_row("parse 8 kB turn", f"{r['parse_MB_per_s']:.0f} MB/s",
                      f"regex tag scan {r['regex_scan_MB_per_s']:.0f} MB/s",
                      f"target >= {r['target_MB_per_s']:.0f} MB/s")
    if "env" in results:
        r = results["env"]
        table.add_row("env step, no-op tool", f"{r['overhead_us']:.1f} us overhead",
                      f"bare tool call {r['bare_tool_call_us']:.2f} us", f"target <= {r['target_overhead_us']:.0f} us")
    if "sandbox" in results:
        r = results["sandbox"]
        label = f"sandbox ({r['backend']}{', UNISOLATED' if r['unisolated'] else ''})"
        baseline = f"python -c p50 {r['python_c_p50_ms']:.1f} ms"
        for arm, what in (("sequential", "back-to-back"), ("paced", "10 ms apart")):
            spread = r[f"{arm}_speedup"]
            table.add_row(f"{label} {what}", f"p50 {r[f'{arm}_p50_ms']:.2f} ms", baseline,
                          f"{spread['median']:.1f}x faster ({spread['min']:.1f}-{spread['max']:.1f})")
        cpu, machine = r["cpu_ms_per_run"], r["machine_cpu_ms_per_run"]
        table.add_row(f"{label} CPU per run", f"{cpu['median']:.1f} ms ({cpu['min']:.1f}-{cpu['max']:.1f})",
                      f"machine-wide {machine['median']:.1f} ms", "caller + workers + run children")
    Console().print(table)
    if warning:
        Console(stderr=True).print(f"[bold red]WARNING:[/] {warning}")
