"""Gather the GPU check's outputs into one JSON file and a short table.

``benchmarks/gpu_check.sh`` runs each script with its stdout in ``DIR/<name>.out`` and the
GPU tests with a JUnit file ``DIR/gpu_tests.xml``; this reads them, derives the figures the
issue asks for (MFU against the nominal peak *and* the measured matmul ceiling, each
throughput beside its same-run baseline) and writes ``DIR/gpu_figures.json``:

    python benchmarks/gpu_report.py DIR --peak-tflops 989

A script that failed or timed out appears with ``"error"`` and the tail of its output, so one
failure never hides the other figures.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

SCRIPTS = ("env", "ceiling", "sft", "sft_4k", "engine", "rl")


def last_json(text: str) -> dict[str, Any] | None:
    """The last JSON object a script printed (one line, or indented over several lines)."""
    lines = text.splitlines()
    for start in range(len(lines) - 1, -1, -1):
        if lines[start].startswith("{"):
            try:
                value = json.loads("\n".join(lines[start:]))
            except json.JSONDecodeError:
                continue
            return value if isinstance(value, dict) else None
    return None


def read_script(directory: Path, name: str) -> dict[str, Any] | None:
    path = directory / f"{name}.out"
    if not path.exists():
        return None
    text = path.read_text(errors="replace")
    value = last_json(text)
    if value is None:
        return {"error": "no JSON result", "tail": text[-1500:]}
    return value


def read_tests(path: Path) -> dict[str, Any] | None:
    """Outcome per GPU test from the JUnit file pytest wrote."""
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    outcomes: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                status = f"{child.tag}: {(child.get('message') or '')[:300]}"
            elif child.tag == "skipped":
                status = f"skipped: {(child.get('message') or '')[:200]}"
        outcomes[name] = status
    counts = {"passed": sum(v == "passed" for v in outcomes.values()),
              "failed": sum(v.startswith(("failure", "error")) for v in outcomes.values()),
              "skipped": sum(v.startswith("skipped") for v in outcomes.values())}
    return {"counts": counts, "tests": outcomes}


def derive(figures: dict[str, Any], peak_tflops: float) -> dict[str, Any]:
    """MFU against the measured ceiling beside the nominal one; the ratios against baselines."""
    derived: dict[str, Any] = {"nominal_peak_tflops": peak_tflops}
    ceiling = (figures.get("ceiling") or {}).get("tflops_mean")
    if ceiling:
        derived["measured_ceiling_tflops"] = ceiling
    for key in ("launch_us", "roundtrip_us"):
        if key in (figures.get("ceiling") or {}):
            derived[key] = figures["ceiling"][key]
    for key in ("sft", "sft_4k"):
        sft = figures.get(key) or {}
        if "ours" not in sft or "gflops_per_token" not in sft:
            continue
        per_token = sft["gflops_per_token"] * 1e9
        row: dict[str, Any] = {"pack_len": sft.get("pack_len")}
        for arm in ("ours", "trl"):
            if arm in sft:
                rate = sft[arm]["tokens_per_s"]
                row[f"{arm}_tokens_per_s"] = round(rate, 1)
                row[f"{arm}_mfu_nominal"] = round(rate * per_token / (peak_tflops * 1e12), 4)
                if ceiling:
                    row[f"{arm}_mfu_ceiling"] = round(rate * per_token / (ceiling * 1e12), 4)
        if "ours_compiled" in sft:
            rate = sft["ours_compiled"]["tokens_per_s"]
            row["ours_compiled_tokens_per_s"] = round(rate, 1)
            row["ours_compiled_mfu_nominal"] = round(rate * per_token / (peak_tflops * 1e12), 4)
            if ceiling:
                row["ours_compiled_mfu_ceiling"] = round(rate * per_token / (ceiling * 1e12), 4)
        if "trl" in sft:
            row["ours_vs_trl"] = round(sft["ours"]["tokens_per_s"] / sft["trl"]["tokens_per_s"], 3)
        derived[key] = row
    engine = figures.get("engine") or {}
    if "engine_vs_generate" in engine:
        derived["engine"] = {k: engine[k] for k in ("batch", "engine_tokens_per_s",
                                                    "generate_tokens_per_s",
                                                    "engine_vs_generate",
                                                    "forward_ms_per_decode_step") if k in engine}
    rl = figures.get("rl") or {}
    if "rollout_tokens_per_s" in rl:
        derived["rl"] = {"rollout_tokens_per_s": rl["rollout_tokens_per_s"]["median"],
                         "learner_tokens_per_s": rl.get("learner_tokens_per_s", {}).get("median"),
                         "learner_mfu_nominal": rl.get("learner_mfu", {}).get("median"),
                         "step_split_s": rl.get("step_split_s")}
    return derived


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    for name in SCRIPTS:
        value = read_script(args.directory, name)
        if value is not None:
            figures[name] = value
    tests = read_tests(args.directory / "gpu_tests.xml")
    if tests is not None:
        figures["gpu_tests"] = tests
    figures["derived"] = derive(figures, args.peak_tflops)
    (args.directory / "gpu_figures.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps({"gpu_tests": (tests or {}).get("counts"), **figures["derived"]}, indent=1))


if __name__ == "__main__":
    main()
