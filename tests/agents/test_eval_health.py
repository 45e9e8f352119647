"""What ``coa eval`` says about a run: the split it played and how many of its tasks, and a run
that completed but measured nothing (every call of a tool failed, the agent could not play)
is an error on the summary with exit status 3; partial failures are loud warnings, exit 0."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from coa_cli.main import app
from tests.env_fixtures import MAKE_KWARGS

runner = CliRunner()


def _eval(*args: str, out) -> tuple[int, str, dict]:
    result = runner.invoke(app, ["eval", *args, "--out", str(out), "--no-plots", "--no-progress"])
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    return result.exit_code, result.output, summary


def _math_file(tmp_path, count: int) -> str:
    rows = "\n".join(f'{{"question": "What is {i} + {i}?", "answer": "{2 * i}"}}' for i in range(count))
    (tmp_path / "mine.jsonl").write_text(rows + "\n", encoding="utf-8")
    return str(tmp_path / "mine.jsonl")


def test_a_data_file_given_to_a_benchmark_is_played_whole_and_the_summary_says_so(tmp_path):
    code, output, summary = _eval("coa/MATH500-v1", "--agent", "oracle", "--data", _math_file(tmp_path, 30),
                                  "--n", "100", out=tmp_path / "run")
    assert code == 0, output
    assert summary["tasks"] == summary["tasks_in_split"] == 30 and summary["accuracy"] == 1.0
    assert summary["split_description"] == "test (test set: every task)"
    assert "played" in output and "30 of 30 tasks" in output and "test (test set: every task)" in output


def test_gaia_from_a_data_file_plays_every_task(tmp_path):
    data = MAKE_KWARGS["coa/GAIA-v1"]["data_path"]
    code, output, summary = _eval("coa/GAIA-v1", "--agent", "oracle", "--data", data, "--n", "1000",
                                  out=tmp_path / "gaia")
    import gymnasium as gym

    env = gym.make("coa/GAIA-v1", data_path=data)
    total = len(env.unwrapped.tasks)
    env.close()
    assert code == 0, output
    assert summary["tasks"] == summary["tasks_in_split"] == total


def test_a_pool_names_its_held_out_side_and_how_many_were_played(tmp_path):
    code, output, summary = _eval("coa/SynthHop-v0", "--agent", "oracle", "--n", "3", out=tmp_path / "pool")
    assert code == 0, output
    assert summary["split_description"] == "test (held-out 20% of a pool)"
    assert "3 of 100 tasks" in output and summary["health"] == {"problems": [], "warnings": []}


def test_every_tool_call_failing_is_an_error_and_exit_3(tmp_path):
    code, output, summary = _eval("coa/SynthHop-v0", "--agent", "oracle", "--n", "2",
                                  "-e", "tools.wiki_search.backend=remote",
                                  "-e", "tools.wiki_search.url=http://127.0.0.1:9/retrieve",
                                  "-e", "tools.wiki_search.retries=0", out=tmp_path / "dead")
    assert code == 3, output
    assert "ERROR: every wiki_search call failed" in output and "measured nothing" in output
    assert summary["health"]["problems"] and "wiki_search" in summary["health"]["problems"][0]


def test_an_agent_that_cannot_play_is_an_error_and_exit_3(tmp_path):
    code, output, summary = _eval("coa/SynthHop-v0", "--agent", "tests.agents.flaky_agents:AlwaysRaises",
                                  "--n", "2", out=tmp_path / "raises")
    assert code == 3, output
    assert summary["errors"] == 2 and summary["health"]["problems"]
    assert "the agent could not play: all 2 episodes ended in an error" in output
    assert "no model behind this agent" in output  # the first error, not only a count


def test_partial_failures_and_the_agents_own_bad_calls_are_warnings_with_exit_0(tmp_path):
    code, output, _ = _eval("coa/SynthHop-v0", "--agent", "tests.agents.flaky_agents:FailsOnFirstTask",
                            "--n", "3", out=tmp_path / "flaky")
    assert code == 0, output
    assert "WARNING: 1 of 3 episodes ended in an error" in output
    code, output, _ = _eval("coa/SynthHop-v0", "--agent", "tests.agents.flaky_agents:CallsAMissingTool",
                            "--n", "2", "--max-turns", "2", out=tmp_path / "missing")
    assert code == 0, output
    assert "WARNING: every code call failed" in output and "tool_not_available" in output


def test_the_oracle_over_a_served_env_without_answers_says_why_and_exits_3(tmp_path):
    pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
    from tests.service.servers import serve

    with serve(["coa/MATH500-v1"]) as url:
        code, output, _ = _eval("coa/MATH500-v1", "--agent", "oracle", "--n", "2", "--env-url", url,
                                out=tmp_path / "served")
    assert code == 3, output
    assert "--expose-answers" in output


@pytest.mark.parametrize("flag, value, label, fragment", [
    ("-e", "tools.wiki_search.top_k=abc", "--env-option", "tools.wiki_search.top_k='abc' is not valid"),
    ("-e", "max_turn=3", "--env-option", "(did you mean 'max_turns'?)"),
    ("-e", "task_options.dificulty=easy", "--env-option", "(did you mean 'difficulty'?)"),
    ("--split", "tset", "--split", "(did you mean 'test'?)"),
])
def test_a_bad_option_names_the_flag_it_came_from(tmp_path, flag, value, label, fragment):
    code, output, _ = _eval("coa/SynthHop-v0", "--agent", "oracle", flag, value, out=tmp_path / "bad")
    assert code == 2 and f"Invalid value for {label}" in output and fragment in " ".join(output.split())
    assert "--split/--data" not in output


def test_a_mistyped_env_id_gets_a_suggestion(tmp_path):
    code, output, _ = _eval("coa/math500-v0", "--agent", "oracle", out=tmp_path / "id")
    assert code == 2 and "did you mean 'coa/MATH500-v1'?" in output


def _episode(tool: str, kinds: dict[str, int], samples: list[str], status: str = "ok"):
    from agents.trajectory import Trajectory

    calls = sum(kinds.values())
    return Trajectory(env_id="coa/X-v0", task_id=f"t{len(samples)}{calls}", status=status,
                      tool_calls={tool: calls}, tool_errors={tool: calls},
                      info={"tool_error_kinds": {tool: kinds}, "tool_error_samples": {tool: samples}})


@pytest.mark.parametrize("episodes, problem", [
    # the same failure whatever was asked: the tool never worked
    ([_episode("wiki_search", {"tool_timeout": 2}, ["(tool_timeout) retriever unavailable"])], True),
    ([_episode("web_search", {"not_configured": 1}, ["(not_configured) set SERPER_API_KEY"])], True),
    # different failures (hallucinated URLs, crashing code): the agent's calls, a measurement
    ([_episode("crawl_page", {"tool_error": 2}, ["(tool_error) 404 at /a", "(tool_error) 404 at /b"])], False),
    ([_episode("code", {"sandbox_violation": 3}, ["(sandbox_violation) no network"])], False),
    # one failed call is too little to say the tool is broken
    ([_episode("crawl_page", {"tool_error": 1}, ["(tool_error) connection refused"])], False),
])
def test_a_tool_that_never_worked_is_told_from_an_agent_that_called_it_badly(episodes, problem):
    from agents.health import run_health

    health = run_health(episodes)
    assert bool(health.problems) is problem and bool(health.warnings) is not problem
