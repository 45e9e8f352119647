"""`coa bench` measures this install against baselines timed in the same call."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from coa_cli.main import app
from coa_envs.bench import realistic_turn
from coa_envs.protocol import parse_turn


def test_the_benchmark_turn_is_a_valid_8kb_coa_turn():
    turn = realistic_turn()
    parsed = parse_turn(turn)
    assert parsed.ok
    assert 7_500 < len(turn) < 8_500 and [c.tool for c in parsed.tool_calls] == ["web_search"]


def test_bench_reports_every_check_with_its_baseline():
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "--only", "protocol,env,sandbox", "--seconds", "0.05", "--runs", "5",
                                 "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert set(report) == {"protocol", "env", "sandbox"}
    assert report["protocol"]["parse_MB_per_s"] > 0 and report["protocol"]["regex_scan_MB_per_s"] > 0
    assert report["env"]["step_us"] > report["env"]["bare_tool_call_us"] > 0
    assert report["sandbox"]["p50_ms"] > 0 and report["sandbox"]["python_c_p50_ms"] > 0
    table = runner.invoke(app, ["bench", "--only", "protocol", "--seconds", "0.05"])
    assert table.exit_code == 0 and "parse 8 kB turn" in table.output


def test_bench_rejects_an_unknown_check():
    result = CliRunner().invoke(app, ["bench", "--only", "protocol,gpu"])
    assert result.exit_code != 0 and "gpu" in result.output
