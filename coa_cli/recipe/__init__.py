"""``coa recipe run CONFIG``: the CoA pipeline on a real model, end to end, with a report.

baseline eval -> teacher on training tasks -> ``coa distill`` -> masked SFT -> RL's task pool
(``coa filter-tasks`` on the SFT model) -> RL from the SFT model -> held-out eval after each
stage -> ``report.md``/``report.json``/``report.png``. Every stage is a ``coa`` command
(:mod:`coa_cli.recipe.stages`); rerunning reuses finished stages.
``examples/recipe_smollm2_cpu.yaml`` is the CPU recipe for SmolLM2-135M-Instruct on multi-hop
SynthHop and MiniWebLarge.
"""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["recipe_app"]

recipe_app = typer.Typer(no_args_is_help=True, add_completion=False,
                         help="Run the CoA pipeline (eval, distil, SFT, RL, report) on a real model.")


def _load(config: Path, overrides: list[str] | None, out: Path | None):
    from coa_cli.recipe.config import load_recipe

    extra = list(overrides or []) + ([f"output_dir={out}"] if out is not None else [])
    try:
        return load_recipe(config, extra)
    except (ValueError, TypeError) as error:
        raise typer.BadParameter(str(error), param_hint="CONFIG / overrides") from error


@recipe_app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    config: Path = typer.Argument(..., exists=True, dir_okay=False,
                                  help="Recipe YAML (see examples/recipe_smollm2_cpu.yaml)."),
    overrides: list[str] = typer.Argument(None, help="key=value overrides, e.g. rl.total_steps=4 "
                                                     "seeds=[0,1,2]"),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory (overrides output_dir)."),
    force: list[str] = typer.Option(None, "--force", help="Rerun this stage (and what depends on it) "
                                                          "even if it is done. Repeatable."),
) -> None:
    """Run every stage not finished yet, then write the report."""
    import signal
    import sys

    import yaml

    # `kill` (SIGTERM) unwinds like Ctrl-C: the running stage records its time and stops its
    # command, so a rerun resumes it with honest wall-time accounting.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    from coa_cli.recipe.report import write_report
    from coa_cli.recipe.runner import RecipeError, run_stages
    from coa_cli.recipe.stages import plan

    cfg = _load(config, overrides, out)
    root = Path(cfg.output_dir)
    root.mkdir(parents=True, exist_ok=True)
    stages = plan(cfg, root)
    unknown = sorted(set(force or []) - {s.name for s in stages})
    if unknown:
        raise typer.BadParameter(f"unknown stage(s) {unknown}; stages: {[s.name for s in stages]}",
                                 param_hint="--force")
    (root / "recipe.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
    _record_run(root)
    _sample_load(root / "load.jsonl")
    try:
        run_stages(cfg, root, stages, force=tuple(force or ()),
                   after_stage=lambda: write_report(cfg, root, stages), echo=typer.echo)
    except RecipeError as error:
        write_report(cfg, root, stages)
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None
    data = write_report(cfg, root, stages)
    for name, target in data["targets"].items():
        typer.echo(f"[recipe] target {name} {target['target']}: "
                   f"{target.get('value', target.get('value_min'))} -> {'met' if target['met'] else 'NOT met'}")
    typer.echo(f"[recipe] report: {root / 'report.md'} (+ report.json, report.png)")


def _sample_load(path: Path, every_s: float = 30.0) -> None:
    """Append the machine's load average to ``path`` every ``every_s`` seconds while this
    process runs (a daemon thread): the report states the load the stages ran under."""
    import json
    import os
    import threading
    import time

    def sample() -> None:
        while True:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"time": time.time(),
                                         "load": [round(x, 2) for x in os.getloadavg()]}) + "\n")
            time.sleep(every_s)

    threading.Thread(target=sample, name="recipe-load", daemon=True).start()


def _record_run(root: Path) -> None:
    """Append this invocation (time, commit, whether the tree had changes, argv) to runs.jsonl:
    the provenance of everything the stages write from now on."""
    import json
    import subprocess
    import sys
    import time

    here = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True,
                                  timeout=30, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    record = {"time": time.time(), "commit": git("rev-parse", "HEAD") or None,
              "dirty": bool(git("status", "--porcelain", "--untracked-files=no")), "argv": sys.argv[1:]}
    with open(root / "runs.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


@recipe_app.command("report")
def report_command(
    config: Path = typer.Argument(..., exists=True, dir_okay=False, help="The recipe YAML of the run."),
    overrides: list[str] = typer.Argument(None, help="The run's key=value overrides."),
    out: Path | None = typer.Option(None, "--out", "-o", help="The run's output directory."),
) -> None:
    """Rewrite report.md/json/png from what the stages wrote so far (runs nothing)."""
    from coa_cli.recipe.report import write_report
    from coa_cli.recipe.stages import plan

    cfg = _load(config, overrides, out)
    root = Path(cfg.output_dir)
    write_report(cfg, root, plan(cfg, root))
    typer.echo(f"wrote {root / 'report.md'}")


@recipe_app.command("ship")
def ship_command(
    run: Path = typer.Argument(..., exists=True, file_okay=False, help="A finished recipe run's output directory."),
    name: str = typer.Option(..., help="The trained agent's name (agents/trained/NAME), e.g. smollm2-135m-coa."),
    figures: Path | None = typer.Option(None, help="Also copy report.md/json/png here (e.g. "
                                                   "docs/figures/recipe_smollm2_cpu)."),
    allow_dirty: bool = typer.Option(False, help="Ship a run made from a tree with uncommitted changes."),
) -> None:
    """Copy a finished run's exported adapter and provenance into the package as a trained agent."""
    import agents
    from coa_cli.recipe.ship import ship_run

    destination = Path(agents.__file__).resolve().parent / "trained" / name
    try:
        record = ship_run(run, destination, figures, allow_dirty=allow_dirty)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="RUN") from error
    primary = record["heldout"].get("primary", {})
    scores = ", ".join(f"{stage} {figure['accuracy']:.3f}" for stage, figure in primary.items())
    typer.echo(f"[recipe] shipped {name} -> {destination} (held-out primary: {scores}; "
               f"commits {', '.join(c[:7] for c in record['commits'])})")
    from agents.trained import TRAINED

    if name not in TRAINED:
        typer.echo(f"[recipe] register it in agents/trained.py TRAINED to serve it by name: "
                   f"TrainedModel({name!r}, '...', {record['model']!r})")
