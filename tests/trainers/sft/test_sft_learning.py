"""Learning, end to end: ``coa train sft --config examples/sft_tiny.yaml`` on SynthHop oracle
trajectories lowers the held-out loss on generated tokens, and the checkpoint it writes, loaded
by the agents' ``hf`` engine, writes CoA turns in greedy decoding.

This is the acceptance command of the SFT trainer (with the data paths pointed at fixtures and
the held-out set taken from SynthHop's *test* split, questions the training data never has).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sft_tiny.yaml"


@pytest.fixture(scope="module")
def trained_run(synthhop_trajectories, synthhop_heldout, tmp_path_factory) -> Path:
    from typer.testing import CliRunner

    from coa_cli.main import app

    out = tmp_path_factory.mktemp("sft_tiny")
    result = CliRunner().invoke(app, [
        "train", "sft", "--config", str(EXAMPLE), f"data.train_path={synthhop_trajectories}",
        f"data.eval_path={synthhop_heldout}", "data.eval_fraction=0",
        f"bookkeeping.output_dir={out}", "bookkeeping.progress=false",
        "bookkeeping.tensorboard=false",
    ])
    assert result.exit_code == 0, result.output
    assert f"model: {out / 'final'}" in result.output
    assert "0 truncated" in result.output  # the example's length settings keep every sample whole
    return out


def test_held_out_loss_on_generated_tokens_falls_clearly(trained_run):
    records = [json.loads(line) for line in (trained_run / "metrics.jsonl").open()]
    evals = [(r["step"], r["eval_loss"]) for r in records if "eval_loss" in r]
    assert evals[0][0] == 0 and len(evals) >= 3
    first, last = evals[0][1], evals[-1][1]
    assert last < 0.35 * first, f"held-out loss {first:.3f} -> {last:.3f}"
    assert evals[1][1] < first and last <= min(loss for _, loss in evals) + 0.05, evals


def _first_turns(model_dir: Path, n: int) -> list[str]:
    """Greedy first turns on SynthHop test questions through LLMPolicy + the hf engine."""
    import gymnasium as gym

    import coa_envs  # noqa: F401
    from agents.engines import SamplingParams
    from agents.engines.hf import HFEngine
    from agents.policy import LLMPolicy

    policy = LLMPolicy(HFEngine(str(model_dir)),
                       sampling=SamplingParams(max_new_tokens=80, temperature=0.0))
    env = gym.make("coa/SynthHop-v0", task_options={"num_tasks": 375, "split": "test"})
    turns = []
    try:
        for index in range(n):
            observation, info = env.reset(seed=index, options={"task_index": index})
            policy.reset(observation, info)
            turns.append(policy.act(observation, info))
    finally:
        env.close()
    return turns


def test_checkpoint_loads_in_the_hf_engine_and_greedy_turns_use_the_coa_format(trained_run):
    from coa_envs.protocol import parse_turn

    turns = _first_turns(trained_run / "final", 6)
    well_formed = [t for t in turns
                   if (p := parse_turn(t)).ok and p.spans and p.spans[0] == "think"
                   and [c.tool for c in p.tool_calls] == ["wiki_search"] and p.tool_calls[0].query]
    assert len(well_formed) >= 4, turns


def test_coa_eval_runs_the_checkpoint_with_the_hf_engine(trained_run, tmp_path):
    from typer.testing import CliRunner

    from coa_cli.main import app

    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "eval", "coa/SynthHop-v0", "--model", str(trained_run / "final"), "--engine", "hf",
        "--temperature", "0", "--n", "3", "--out", str(out),
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["errors"] == 0
    assert summary["tool_calls"].get("wiki_search", 0) >= 3  # it searches, as the data taught it
