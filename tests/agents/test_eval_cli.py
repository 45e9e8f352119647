"""``coa eval`` with a real model (the tiny one, through the hf and openai engines) writes
every file a user reads, and ``coa report`` compares runs with plots."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("matplotlib", reason="needs the [llm] extra")

from coa_cli.main import app

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"
TINY = ["--max-new-tokens", "12", "--max-turns", "2", "--n", "2", "--samples", "2",
        "--concurrency", "2", "--no-progress"]


def _eval(env_id, out, *args):
    result = runner.invoke(app, ["eval", env_id, *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def two_runs(tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    outs = {}
    for env_id, name in (("coa/MATH500-v1", "math"), ("coa/SynthHop-v0", "synthhop")):
        outs[name] = root / name
        printed = _eval(env_id, outs[name], "--model", str(tiny_dir), "--engine", "hf", *TINY).output
        assert "pass@2" in printed and "best-of-2" in printed  # the printed table
    return outs


@pytest.mark.parametrize("name", ["math", "synthhop"])
def test_eval_with_the_tiny_model_writes_all_files_and_plots(two_runs, name):
    from agents.trajectory import read_trajectories

    out = two_runs[name]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["agent"] == "llm" and summary["engine"] == "hf"
    assert summary["episodes"] == 4 and summary["tasks"] == 2 and summary["samples"] == 2
    assert set(summary["pass_at_k"]) == {"1", "2"} and set(summary["best_of_k"]) == {"2"}
    assert isinstance(summary["tokens_per_episode"], float) and summary["tokens_per_episode"] > 0
    # failures are counted apart from wrong answers; every episode has a status
    assert sum(summary["status_counts"].values()) == 4
    assert summary["failed_episodes"] == 4 - summary["status_counts"].get("ok", 0)
    records = list(read_trajectories(out / "trajectories.jsonl"))
    assert [r.sample_index for r in records] == [0, 1, 0, 1]  # rewritten in task order
    assert len(records) == 4 and all(r.has_token_ids for r in records)
    for name_ in ("accuracy_vs_turns.png", "tool_usage.png"):
        assert (out / "plots" / name_).read_bytes()[:8] == PNG


def test_report_compares_two_envs_side_by_side(two_runs, tmp_path):
    result = runner.invoke(app, ["report", str(two_runs["math"]), str(two_runs["synthhop"]),
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "comparison.md").read_text()
    assert "| metric | math | synthhop |" in table and "| pass@2 |" in table
    data = json.loads((tmp_path / "comparison.json").read_text())
    assert [r["summary"]["env_id"] for r in data["runs"]] == ["coa/MATH500-v1", "coa/SynthHop-v0"]
    for name in ("accuracy_vs_turns.png", "tool_usage.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG


def test_report_rejects_a_directory_without_summary(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r")])
    assert result.exit_code != 0 and "summary.json" in result.output


def test_eval_over_coa_serve_with_the_openai_engine_is_token_exact(tiny_dir, tiny_tokenizer, tmp_path):
    pytest.importorskip("fastapi", reason="needs the [serve] extra")
    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread
    from agents.trajectory import read_trajectories

    engine = HFEngine(str(tiny_dir))
    with serve_in_thread(create_app(engine, engine.tokenizer, "tiny")) as url:
        _eval("coa/MATH500-v1", tmp_path, "--engine", "openai", "--base-url", url, "--model", "tiny",
              "--tokenizer", str(tiny_dir), *TINY)
    records = list(read_trajectories(tmp_path / "trajectories.jsonl"))
    assert len(records) == 4
    for record in records:
        assert record.has_token_ids
        text = record.prompt_text + record.response_text
        assert tiny_tokenizer.decode(record.input_ids(), skip_special_tokens=False) == text


def test_eval_against_a_dead_endpoint_reports_failures_and_finishes(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = runner.invoke(app, ["eval", "coa/MATH500-v1", "--engine", "openai", "--base-url",
                                 f"http://127.0.0.1:{port}/v1", "--model", "m", "--api-mode", "chat", *TINY,
                                 "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status_counts"] == {"error:engine_http_error": 4}
    assert summary["errors"] == 4 and summary["accuracy"] == 0.0
    # a run in which the agent could not play measured nothing: it says so and exits 3
    assert result.exit_code == 3 and "the agent could not play" in result.output


def test_resume_runs_only_the_missing_episodes(tmp_path):
    _eval("coa/AIME24-v1", tmp_path, "--n", "2", "--samples", "2", "--no-progress")
    _eval("coa/AIME24-v1", tmp_path, "--n", "3", "--samples", "2", "--resume", "--no-progress")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["resumed_episodes"] == 4 and summary["episodes"] == 6
    assert summary["accuracy"] == 1.0 and summary["pass_at_k"] == {"1": 1.0, "2": 1.0}
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == 6


def test_custom_agent_and_selector_by_import_path(tmp_path):
    _eval("coa/SynthHop-v0", tmp_path, "--agent", "agents.baselines:retrieval_baseline",
          "--selector", "agents.metrics:majority_vote", "--n", "3", "--samples", "2", "--no-progress")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["agent"] == "agents.baselines:retrieval_baseline"
    assert summary["tool_calls"] == {"wiki_search": 6} and summary["mean_turns"] == 2.0
    bad = runner.invoke(app, ["eval", "coa/SynthHop-v0", "--agent", "no_such_module:x",
                              "--out", str(tmp_path / "bad")])
    assert bad.exit_code != 0


def test_hosted_api_flag_turns_the_openai_engines_server_extensions_off(monkeypatch, tmp_path):
    """`coa eval --hosted-api` builds the openai engine with only standard request fields."""
    from coa_cli import eval as eval_cli

    policy = eval_cli.build_policy(engine="openai", model="m", base_url="http://127.0.0.1:9/v1", api_key="k",
                                   api_mode="chat", tokenizer=None, device="cpu", dtype="float32", sampling=None,
                                   system_prompt=None, concurrency=1, timeout_s=1.0, server_extensions=False)
    assert policy.engine.server_extensions is False

    built: dict = {}

    def record(**options):
        built.update(options)
        raise RuntimeError("recorded")  # the options are what this test checks; no server is run

    monkeypatch.setattr("agents.evaluation.build_policy", record)  # the runner behind coa eval
    for flag, expected in (("--hosted-api", False), ("--server-extensions", True), (None, True)):
        built.clear()
        args = ["eval", "coa/MATH500-v1", "--agent", "llm", "--engine", "openai", "--model", "m",
                "--base-url", "http://127.0.0.1:9/v1", "--n", "1", "--out", str(tmp_path)]
        CliRunner().invoke(app, args + ([flag] if flag else []))
        assert built["server_extensions"] is expected
def test_env_options_reach_the_env_and_a_bad_one_names_the_flag(tmp_path):
    # -e sets gym.make options (dotted keys into task_options); --split still picks the side.
    _eval("coa/SynthHop-v0", tmp_path, "--agent", "oracle", "--split", "all", "--n", "50",
          "-e", "task_options.num_tasks=10", "-e", "tools.wiki_search.top_k=1", "--no-progress", "--no-plots")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == summary["distinct_tasks"] == 10 and summary["split"] == "all"
    for option, message in (("novalue", "key=value"), ("bogus=1", "bogus")):
        bad = runner.invoke(app, ["eval", "coa/SynthHop-v0", "--agent", "oracle", "-e", option,
                                  "--out", str(tmp_path / "bad")])
        assert bad.exit_code != 0 and message in bad.output, bad.output
