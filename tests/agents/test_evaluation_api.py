"""The eval runner is a library (agents.evaluation): a run set up in Python plays and scores like
``coa eval``, and a setting it cannot use raises RunSetupError naming the argument, which the
command line reports as the error of the flag it came from."""

from __future__ import annotations

import json

import pytest
import typer

from agents.evaluation import RunSetupError, agent_factory, env_tasks, load_selector, play_tasks
from coa_envs.errors import UserError


def test_a_run_set_up_in_python_plays_and_scores_the_oracle(tmp_path):
    make_kwargs, tasks = env_tasks("coa/SynthHop-v0", split="test", data=None, max_turns=None,
                                   options={"task_options": {"difficulty": "easy", "num_tasks": 20}})
    assert make_kwargs["task_options"]["split"] == "test" and len(tasks) == 4  # the held-out fifth
    out = tmp_path / "trajectories.jsonl"
    result = play_tasks("coa/SynthHop-v0", make_kwargs, agent_factory("oracle"), tasks, indices=[0, 1],
                        samples=2, out=out, concurrency=2, seed=0)
    assert len(result.trajectories) == 4 and all(t.reward == 1.0 for t in result.trajectories)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["sample_index"]) for r in rows] == [
        (tasks[0].task_id, 0), (tasks[0].task_id, 1), (tasks[1].task_id, 0), (tasks[1].task_id, 1)]


@pytest.mark.parametrize("call, argument", [
    (lambda: agent_factory("llm"), "agent"),
    (lambda: agent_factory("nobody"), "agent"),
    (lambda: agent_factory("no_such_module_xyz:Agent"), "agent"),
    (lambda: load_selector("best"), "selector"),
    (lambda: env_tasks("coa/NoSuchEnv-v0", split="test", data=None, max_turns=None), "env_id"),
    (lambda: env_tasks("coa/SynthHop-v0", split="test", data=None, max_turns=None,
                       options={"max_turn": 3}), "options"),
    (lambda: env_tasks("coa/SynthHop-v0", split="tset", data=None, max_turns=None), "split"),
])
def test_a_setting_that_cannot_work_names_its_argument(call, argument):
    with pytest.raises(RunSetupError) as caught:
        call()
    assert caught.value.argument == argument
    assert isinstance(caught.value, UserError) and isinstance(caught.value, ValueError)


def test_the_command_line_reports_it_as_the_flag_it_came_from():
    from coa_cli.options import flag_errors

    @flag_errors
    def command() -> None:
        load_selector("best")

    with pytest.raises(typer.BadParameter) as caught:
        command()
    assert caught.value.param_hint == "--selector" and "unknown selector 'best'" in str(caught.value)


def test_the_runner_names_stay_importable_from_the_eval_command_for_a_release():
    import agents.evaluation
    import coa_cli.eval

    for name in ("agent_factory", "env_tasks", "episode_agents", "play_tasks", "load_selector"):
        assert getattr(coa_cli.eval, name) is getattr(agents.evaluation, name)
    with pytest.raises(AttributeError):
        coa_cli.eval.no_such_name  # noqa: B018
