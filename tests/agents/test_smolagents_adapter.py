"""A real agent framework (smolagents) drives coa envs through their own tools."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("smolagents", reason="needs the [agents-framework] extra")

import coa_envs  # noqa: F401
from agents.adapters.smol import oracle_tool_model, run_smolagents_episode
from coa_envs.protocol import parse_turn


@pytest.mark.parametrize("task_index", [0, 1, 2])
def test_scripted_smolagents_model_solves_synthhop(task_index):
    env = gym.make("coa/SynthHop-v0")
    env.reset(options={"task_index": task_index})
    model = oracle_tool_model(env.unwrapped.task)
    trajectory = run_smolagents_episode(env, model, options={"task_index": task_index})
    env.close()
    assert trajectory.status == "ok" and trajectory.reward == 1.0
    assert trajectory.tool_calls.get("wiki_search", 0) >= 1
    # The framework's moves are recorded as valid CoA turns with env observations between.
    kinds = [s.kind for s in trajectory.segments]
    assert kinds[-1] == "generated" and kinds.count("observation") == kinds.count("generated") - 1
    for segment in trajectory.segments:
        if segment.kind == "generated":
            assert parse_turn(segment.text).ok


def test_smolagents_against_coa_serve_end_to_end(tiny_dir):
    """The real path: smolagents' OpenAIServerModel -> coa serve (tiny model) -> env tools.
    A random model cannot solve the task; the run must still finish with a clear status."""
    from smolagents import OpenAIServerModel

    from agents.engines.hf import HFEngine
    from agents.server import create_app, serve_in_thread

    engine = HFEngine(str(tiny_dir))
    app = create_app(engine, engine.tokenizer, "tiny")
    with serve_in_thread(app) as url:
        model = OpenAIServerModel(model_id="tiny", api_base=url, api_key="x", max_tokens=12)
        env = gym.make("coa/SynthHop-v0")
        trajectory = run_smolagents_episode(env, model, options={"task_index": 0}, max_steps=2)
        env.close()
    assert sum(app.state.engine.batch_sizes) >= 2  # the server answered the framework
    assert trajectory.status == "ok" and trajectory.terminated
    assert trajectory.reward == 0.0 and trajectory.answer


def test_our_agents_package_is_not_shadowed():
    """openai-agents would install a top-level `agents`; we ship smolagents instead."""
    import agents

    assert Path(agents.__file__).resolve().parent == Path(__file__).resolve().parents[2] / "agents"
