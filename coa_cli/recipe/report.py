"""The recipe's report: held-out accuracy per stage with intervals, gains, targets, timings.

Written after every stage (so a long run shows progress) and at the end:

* ``report.json``: per eval set and stage, accuracy per seed, the mean over (task, seed)
  episodes and its 95% bootstrap interval over tasks; the paired gains SFT - baseline and
  RL - SFT (per-task differences, bootstrapped the same way); the targets and whether they
  were met; wall time and load average per stage; SFT and RL figures; the RL curve.
* ``report.md``: the same as tables, with the command of every stage.
* ``report.png``: baseline -> SFT -> RL bars with their intervals, and the RL curve.

Accuracy is the share of episodes the env's reward scores 1.0 (exact match for SynthHop),
whatever reward RL trained on. Targets are reported, never used to choose what is measured.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from coa_cli.recipe.config import EvalSet, RecipeConfig
from coa_cli.recipe.plot import plot_report
from coa_cli.recipe.stages import EVAL_STAGES, Stage, adapter_path, eval_runs, pool_path, trained_sets

__all__ = ["collect", "write_report"]

_LABELS = {"baseline": "baseline", "sft_eval": "SFT", "rl_eval": "RL"}


def _per_task(path: Path) -> dict[str, float] | None:
    """task id -> correct (1.0/0.0) for one finished eval run; None while it is not finished."""
    from agents.trajectory import read_trajectories

    if not (path / "summary.json").is_file():
        return None
    return {t.task_id: float(t.reward >= 1.0) for t in read_trajectories(path / "trajectories.jsonl")}


def _interval(values: list[float]) -> list[float]:
    from agents.metrics import bootstrap_ci

    low, high = bootstrap_ci(values)
    return [round(low, 4), round(high, 4)]


def _stage_result(config: RecipeConfig, out: Path, stage: str, set_name: str) -> dict[str, Any] | None:
    runs = [run for run, spec in eval_runs(config, out, stage) if spec.name == set_name]
    per_seed = {run.seed: _per_task(run.out) for run in runs}
    if any(v is None for v in per_seed.values()):
        return None
    tasks = sorted(set.intersection(*(set(v) for v in per_seed.values())))  # type: ignore[arg-type]
    by_task = {t: sum(per_seed[s][t] for s in per_seed) / len(per_seed) for t in tasks}  # type: ignore[index]
    summaries = [json.loads((run.out / "summary.json").read_text(encoding="utf-8")) for run in runs]
    statuses: dict[str, int] = {}
    for summary in summaries:
        for status, count in summary.get("status_counts", {}).items():
            statuses[status] = statuses.get(status, 0) + count
    values = list(by_task.values())
    return {
        "accuracy": round(sum(values) / len(values), 4) if values else 0.0,
        "ci95": _interval(values) if values else [0.0, 0.0],
        "per_seed": {str(s): round(sum(v.values()) / max(len(v), 1), 4) for s, v in per_seed.items()},  # type: ignore[union-attr]
        "tasks": len(tasks),
        "episodes": sum(len(v) for v in per_seed.values()),  # type: ignore[arg-type]
        "status_counts": statuses,
        "mean_turns": round(sum(s.get("mean_turns", 0.0) for s in summaries) / len(summaries), 3),
        "tool_calls_per_episode": round(sum(s.get("tool_calls_per_episode", 0.0) for s in summaries)
                                        / len(summaries), 3),
        "_by_task": by_task,
    }


def _gain(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    if before is None or after is None:
        return None
    tasks = sorted(set(before["_by_task"]) & set(after["_by_task"]))
    if not tasks:
        return None
    diffs = [after["_by_task"][t] - before["_by_task"][t] for t in tasks]
    return {"mean": round(sum(diffs) / len(diffs), 4), "ci95": _interval(diffs), "tasks": len(tasks)}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line of an interrupted run
    return rows


# Per RL step: what the report keeps of metrics.jsonl (key in the report -> metric name).
_DYNAMICS = {
    "batch_reward": "rollout/reward_mean", "batch_accuracy": "rollout/accuracy",
    "kept_pass_rate": "sampling/kept_pass_rate", "drawn_pass_rate": "sampling/drawn_pass_rate",
    "groups_kept": "sampling/groups_kept", "groups_drawn": "sampling/groups_drawn",
    "entropy": "policy/entropy", "kl_to_sft": "kl/ref", "response_tokens": "rollout/response_tokens",
    "truncated": "rollout/truncated", "clip_frac": "policy/clip_frac",
    "rollout_s": "time/rollout_s", "learner_s": "time/learner_s",
}


def _dynamics(row: dict[str, Any]) -> dict[str, Any]:
    """One step's figures to 4 significant digits, not 4 decimals: the KL to the SFT policy lives
    around 1e-4, where 4 decimals drew its curve as a staircase of 0, 1e-4 and 2e-4."""
    point: dict[str, Any] = {"step": row["step"]}
    for key, metric in _DYNAMICS.items():
        if metric in row:
            point[key] = float(f"{float(row[metric]):.4g}")
    calls, errors = row.get("rollout/tool_calls", 0.0), row.get("rollout/tool_errors", 0.0)
    point["tool_failure_share"] = round(errors / calls, 4) if calls else 0.0
    return point


def _pool(config: RecipeConfig, out: Path) -> dict[str, Any] | None:
    """Per trained env: the pass-rate bands ``coa filter-tasks`` found and what RL got."""
    if config.pool.tasks <= 0:
        return None
    result = {}
    for spec in trained_sets(config):
        report_path = pool_path(out, spec.name).with_suffix(".report.json")
        if not report_path.is_file():
            continue
        report = json.loads(report_path.read_text(encoding="utf-8"))
        kept = _read_jsonl(pool_path(out, spec.name))
        rates = [float(r["pass_rate"]) for r in kept]
        every = [solved / played for solved, played in report.get("per_task", {}).values() if played]
        result[spec.name] = {
            "candidates": report.get("tasks"), "samples": report.get("samples"), "keep": report.get("keep"),
            "bands": report.get("bands"), "solved_histogram": report.get("solved_histogram"),
            "kept": len(kept), "kept_pass_rate_mean": round(sum(rates) / len(rates), 4) if rates else None,
            "candidates_pass_rate_mean": round(sum(every) / len(every), 4) if every else None,
            "wall_s": report.get("wall_s"),
        }
    return result or None


def _export(out: Path) -> dict[str, Any] | None:
    path = adapter_path(out) / "extraction.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _load(out: Path) -> dict[str, Any] | None:
    """The 1-minute load average sampled every 30 s while the recipe ran (``load.jsonl``)."""
    samples = [r["load"][0] for r in _read_jsonl(out / "load.jsonl") if r.get("load")]
    if not samples:
        return None
    ordered = sorted(samples)
    return {"samples": len(samples), "mean": round(sum(samples) / len(samples), 2), "min": ordered[0],
            "median": ordered[len(ordered) // 2], "max": ordered[-1]}


def _runs(out: Path) -> list[dict[str, Any]]:
    """Every ``coa recipe run`` of this directory: when, at which commit, with which arguments."""
    return _read_jsonl(out / "runs.jsonl")


def write_provenance(data: dict[str, Any], out: Path) -> Path | None:
    """``provenance.json`` beside the exported adapter once the run is complete: the recipe
    config and seeds, the commit(s) the stages ran at, the held-out figures and the
    extraction's losses -- what a shipped trained agent must say about itself."""
    directory = adapter_path(out)
    if not data["complete"] or not (directory / "adapter_model.safetensors").is_file():
        return None
    commits = sorted({r.get("commit") for r in data.get("runs", []) if r.get("commit")})
    config = data["config"]
    provenance = {
        "recipe": config, "model": data["model"], "eval_seeds": config["seeds"],
        "training_seeds": {"rl": int(dict(config["rl"].get("bookkeeping") or {}).get("seed", 0)),
                           "sft": int(dict(config["sft"].get("bookkeeping") or {}).get("seed", 0))},
        "commits": commits, "dirty_tree": any(r.get("dirty") for r in data.get("runs", [])),
        "heldout": data["evals"], "gains": data["gains"], "targets": data["targets"],
        "eval_protocol": data["eval_protocol"], "extraction": data.get("export"),
        "total_wall_s": data["total_wall_s"], "machine": data["machine"],
    }
    path = directory / "provenance.json"
    path.write_text(json.dumps(provenance, indent=2), encoding="utf-8")
    return path


def _training(config: RecipeConfig, out: Path) -> dict[str, Any]:
    sft_rows = [r for r in _read_jsonl(out / "sft" / "metrics.jsonl") if "loss" in r]
    rl_rows = _read_jsonl(out / "rl" / "metrics.jsonl")
    steps = [r for r in rl_rows if "rollout/reward_mean" in r]
    evals = [r for r in rl_rows if "eval/heldout_reward_mean" in r]
    reports = sorted((out / "distill").glob("*.jsonl.report.json"))
    result: dict[str, Any] = {"distill": {p.name.split(".")[0]: json.loads(p.read_text()) for p in reports}
                              or None, "pool": _pool(config, out)}
    if sft_rows:
        last = sft_rows[-1]
        result["sft"] = {"steps": last.get("step"), "final_loss": last.get("loss"),
                         "trained_tokens_per_s": last.get("tokens_per_s"), "elapsed_s": last.get("elapsed_s"),
                         "tokens": last.get("tokens")}
    if steps:
        def mean(key: str) -> float:
            return round(sum(r.get(key, 0.0) for r in steps) / len(steps), 3)

        names = [s.name for s in trained_sets(config)]
        result["rl"] = {
            "steps": len(steps), "episodes": int(sum(r.get("rollout/episodes", 0) for r in steps)),
            "trained_episodes": int(sum(r.get("train/episodes", 0) for r in steps)),
            "groups_kept_mean": mean("sampling/groups_kept"), "groups_drawn_mean": mean("sampling/groups_drawn"),
            "groups_filtered_all_equal_mean": mean("sampling/groups_filtered_all_equal"),
            "skipped_steps": int(sum(r.get("train/skipped", 0) for r in steps)),
            "rollout_s_mean": mean("time/rollout_s"), "learner_s_mean": mean("time/learner_s"),
            "rollout_tokens_per_s_mean": mean("perf/rollout_tokens_per_s"),
            "curve": [_dynamics(r) for r in steps],
            "heldout_curve": [{"step": r["step"], "reward": round(r["eval/heldout_reward_mean"], 4),
                               "tasks": r.get("eval/heldout_tasks"),
                               **{name: round(r[f"eval/{name}/heldout_reward_mean"], 4)
                                  for name in names if f"eval/{name}/heldout_reward_mean" in r}}
                              for r in evals],
        }
    return result


def _targets(config: RecipeConfig, gains: dict[str, dict[str, Any]], total_s: float,
             complete: bool) -> dict[str, Any]:
    sft_gain, rl_gain = gains["primary"]["sft_minus_baseline"], gains["primary"]["rl_minus_sft"]
    targets = {
        "sft_gain": {"target": f">= {config.target_sft_gain}", "value": sft_gain and sft_gain["mean"],
                     "met": None if sft_gain is None else sft_gain["mean"] >= config.target_sft_gain},
        "rl_gain": {"target": f">= {config.target_rl_gain}, 95% interval above 0",
                    "value": rl_gain and rl_gain["mean"], "ci95": rl_gain and rl_gain["ci95"],
                    "met": None if rl_gain is None else
                    (rl_gain["mean"] >= config.target_rl_gain and rl_gain["ci95"][0] > 0)},
    }
    for spec in config.envs:
        assert isinstance(spec, EvalSet)
        sft, rl = gains[spec.name]["sft_minus_baseline"], gains[spec.name]["rl_minus_sft"]
        if spec.target_sft_gain is not None:
            targets[f"{spec.name}_sft_gain"] = {
                "target": f">= {spec.target_sft_gain}", "value": sft and sft["mean"],
                "met": None if sft is None else sft["mean"] >= spec.target_sft_gain}
        targets[f"{spec.name}_rl_not_below_sft"] = {
            "target": ">= 0 (RL not below SFT)", "value": rl and rl["mean"], "ci95": rl and rl["ci95"],
            "met": None if rl is None else rl["mean"] >= 0}
    targets["wall_time"] = {"target": f"<= {config.target_minutes} min", "value_min": round(total_s / 60, 1),
                            "met": (total_s / 60 <= config.target_minutes) if complete else None}
    return targets


def collect(config: RecipeConfig, out: Path, stages: list[Stage]) -> dict[str, Any]:
    """Everything the report shows, from the files the stages wrote (partial runs included)."""
    sets = ["primary", *[t.name for t in config.envs]]
    evals: dict[str, dict[str, Any]] = {}
    gains: dict[str, dict[str, Any]] = {}
    for name in sets:
        results = {stage: _stage_result(config, out, stage, name) for stage in EVAL_STAGES}
        gains[name] = {"sft_minus_baseline": _gain(results["baseline"], results["sft_eval"]),
                       "rl_minus_sft": _gain(results["sft_eval"], results["rl_eval"])}
        evals[name] = {_LABELS[k]: ({key: v for key, v in r.items() if key != "_by_task"} if r else None)
                       for k, r in results.items()}
    states = {}
    for stage in stages:
        path = out / stage.name / "stage.json"
        states[stage.name] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    total_s = sum(float(s.get("wall_s", 0.0)) for s in states.values() if s)
    complete = all(s and s.get("status") == "done" for s in states.values())
    targets = _targets(config, gains, total_s, complete)
    return {
        "model": config.model, "env_id": config.env_id, "complete": complete,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_now": [round(x, 2) for x in os.getloadavg()]},
        "eval_protocol": {"seeds": config.seeds, "temperature": config.temperature,
                          "heldout_tasks": config.heldout_tasks, "max_turns": config.max_turns,
                          "max_new_tokens": config.max_new_tokens,
                          "interval": "95% percentile bootstrap over tasks (10,000 resamples); "
                                      "gains are paired per task"},
        "evals": evals, "gains": gains, "targets": targets,
        "stages": {name: ({k: v for k, v in s.items() if k != "fingerprint"} if s else None)
                   for name, s in states.items()},
        "total_wall_s": round(total_s, 1),
        **_training(config, out),
        "export": _export(out), "runs": _runs(out), "load_during_run": _load(out),
        "config": config.to_dict(),
    }


def _fmt(result: dict[str, Any] | None) -> str:
    if result is None:
        return "—"
    low, high = result["ci95"]
    return f"{result['accuracy']:.3f} [{low:.3f}, {high:.3f}]"


def _markdown(data: dict[str, Any], stages: list[Stage]) -> str:
    lines = [f"# Recipe report: {data['model']} on {data['env_id']}", ""]
    if not data["complete"]:
        lines += ["**Partial: some stages have not finished.**", ""]
    protocol = data["eval_protocol"]
    lines += [f"Held-out accuracy (share of episodes with reward 1), {len(protocol['seeds'])} seeds "
              f"(temperature {protocol['temperature']}), mean [{protocol['interval']}].", "",
              "| eval set | baseline | SFT | RL | SFT − baseline | RL − SFT |", "|---|---|---|---|---|---|"]
    for name, by_stage in data["evals"].items():
        gains = data["gains"][name]
        cells = [_fmt(by_stage[label]) for label in ("baseline", "SFT", "RL")]
        cells += ["—" if g is None else f"{g['mean']:+.3f} [{g['ci95'][0]:+.3f}, {g['ci95'][1]:+.3f}]"
                  for g in (gains["sft_minus_baseline"], gains["rl_minus_sft"])]
        tasks = next((r["tasks"] for r in by_stage.values() if r), "?")
        lines.append(f"| {name} ({tasks} tasks) | " + " | ".join(cells) + " |")
    lines += ["", "## Targets", "", "| target | value | met |", "|---|---|---|"]
    for name, target in data["targets"].items():
        value = target.get("value", target.get("value_min"))
        met = {True: "yes", False: "**no**", None: "not yet"}[target["met"]]
        lines.append(f"| {name} {target['target']} | {value} | {met} |")
    machine = data["machine"]
    load = data.get("load_during_run")
    load_line = (f" Load average (1 min) while the recipe ran, sampled every 30 s ({load['samples']} samples): "
                 f"mean {load['mean']}, median {load['median']}, min {load['min']}, max {load['max']}."
                 if load else "")
    lines += ["", "## Stages", "", f"Machine: {machine['cpus']} CPUs, {machine['platform']}.{load_line}", "",
              "| stage | wall time | load average (start → end) | status |", "|---|---|---|---|"]
    for stage in stages:
        state = data["stages"].get(stage.name)
        if not state:
            lines.append(f"| {stage.name} | — | — | not run |")
            continue
        load = state.get("load_average") or {}
        load_text = f"{load['start']:.1f} → {load['end']:.1f}" if load else "—"
        lines.append(f"| {stage.name} | {state['wall_s'] / 60:.1f} min | {load_text} | {state['status']} |")
    lines.append(f"| total | {data['total_wall_s'] / 60:.1f} min | | |")
    for name, d in (data.get("distill") or {}).items():
        lines += ["", f"**distill ({name})**: kept {d.get('kept')} of {d.get('read')} teacher episodes "
                      f"({d.get('tasks_kept')} of {d.get('tasks_seen')} training tasks)."]
    for key in ("sft", "rl"):
        if data.get(key):
            shown = {k: v for k, v in data[key].items() if not k.endswith("curve")}
            lines += ["", f"**{key}**: `{json.dumps(shown)}`"]
    if data.get("export"):
        e = data["export"]
        lines += ["", f"**export** (the shipped agent, what the RL eval scores): rank {e['rank']} LoRA over "
                      f"{e['modules']} layers, {e['adapter_bytes'] / 1e6:.2f} MB {e['dtype']}; delta energy kept "
                      f"{e['energy_kept']:.4f} (lowest layer {e['energy_kept_min']:.4f}); next-token KL to the "
                      f"RL model {e['probe_kl']:.2e}, top-1 agreement {e['probe_top1_agreement']:.3f}; "
                      f"{len(e['dropped_delta_norm'])} changed parameters an adapter cannot hold."]
    lines += _pool_lines(data.get("pool")) + _dynamics_lines(data.get("rl"))
    lines += ["", "## Commands", ""]
    for stage in stages:
        lines += [f"- {stage.name}:"] + [f"  - `{command}`" for command in stage.shell()]
    lines += ["", "![baseline, SFT and RL held-out accuracy; RL curve](report.png)", ""]
    return "\n".join(lines)


def _pool_lines(pool: dict[str, Any] | None) -> list[str]:
    if not pool:
        return []
    lines = ["", "## RL's task pool (the SFT model's pass rate on training tasks it was not taught)", "",
             "| env | candidates × samples | kept (band) | never / below / above / always solved | "
             "pass rate: candidates → kept |", "|---|---|---|---|---|"]
    for name, p in pool.items():
        bands = p.get("bands") or {}
        lines.append(f"| {name} | {p['candidates']} × {p['samples']} | {p['kept']} ({p['keep'][0]:g}-{p['keep'][1]:g}) "
                     f"| {bands.get('never solved', 0)} / {bands.get('below band', 0)} / "
                     f"{bands.get('above band', 0)} / {bands.get('always solved', 0)} | "
                     f"{p['candidates_pass_rate_mean']} → {p['kept_pass_rate_mean']} |")
    return lines


_COLUMNS = ("batch_reward", "kept_pass_rate", "drawn_pass_rate", "groups_kept", "groups_drawn",
            "entropy", "kl_to_sft", "response_tokens", "tool_failure_share", "truncated")


def _dynamics_lines(rl: dict[str, Any] | None) -> list[str]:
    if not rl or not rl.get("curve"):
        return []
    lines = ["", "## RL dynamics per step", "",
             "`batch_reward`: mean reward of every episode sampled in the step (refill rounds "
             "included); `kept_pass_rate`: share solved in the groups trained on; "
             "`drawn_pass_rate`: in every complete group drawn; `kl_to_sft`: KL(policy ‖ SFT "
             "policy) on the trained tokens; `tool_failure_share`: tool calls that failed.", "",
             "| step | " + " | ".join(_COLUMNS) + " |", "|---" * (len(_COLUMNS) + 1) + "|"]
    for point in rl["curve"]:
        cells = [f"{point[c]:.3g}" if isinstance(point.get(c), float | int) else "—" for c in _COLUMNS]
        lines.append(f"| {point['step']} | " + " | ".join(cells) + " |")
    return lines


def write_report(config: RecipeConfig, out: Path, stages: list[Stage]) -> dict[str, Any]:
    """Write report.json, report.md and report.png into ``out``; returns the report data."""
    data = collect(config, out, stages)
    (out / "report.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    (out / "report.md").write_text(_markdown(data, stages), encoding="utf-8")
    plot_report(data, out / "report.png")
    write_provenance(data, out)
    return data
