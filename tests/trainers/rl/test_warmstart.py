"""The SFT warm start's data: real oracle episodes through the RL env, role prose stripped."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainers.rl.config import ConfigError, load_config
from trainers.rl.warmstart import oracle_trajectories, strip_roles

ROOT = Path(__file__).resolve().parents[3]
ENV_KWARGS = {"task_options": {"difficulty": "easy", "num_tasks": 4},
              "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}},
              "system_prompt": "Search the wiki, then answer."}


def test_strip_roles_keeps_the_tool_call_and_the_answer():
    action = "<think>I will look it up.</think>\n<wiki_search>Foo Bridge designer</wiki_search>"
    assert strip_roles(action) == "<wiki_search>Foo Bridge designer</wiki_search>"
    assert strip_roles("<plan>x</plan><answer>Corin</answer>") == "<answer>Corin</answer>"
    assert strip_roles("no tags at all") == "no tags at all"  # malformed: left as it was


def test_oracle_trajectories_are_solved_episodes_of_the_rl_env(tmp_path):
    from agents.trajectory import read_trajectories

    cfg = load_config(values={"env": {"id": "coa/SynthHop-v0", "kwargs": ENV_KWARGS,
                                      "max_turns": 3},
                              "resources.use_ray": False})
    path, kept = oracle_trajectories(cfg, tmp_path / "oracle.jsonl", episodes=6)
    rows = list(read_trajectories(path))
    assert kept == len(rows) == 6
    assert {r.task_id for r in rows} == {r.task_id for r in rows[:4]}  # cycles over 4 tasks
    for row in rows:
        assert row.reward == 1.0 and row.terminated
        assert row.prompt_messages[0]["content"] == "Search the wiki, then answer."
        kinds = [s.kind for s in row.segments]
        assert kinds == ["generated", "observation", "generated"]
        assert row.segments[0].text.startswith("<wiki_search>")
        assert "<think>" not in row.segments[0].text + row.segments[2].text
        assert row.segments[1].text.startswith("\n<observation>\n")  # the env's own rendering
        assert row.segments[2].text == f"<answer>{row.answer}</answer>"


def test_warm_start_and_init_checkpoint_exclude_each_other():
    with pytest.raises(ConfigError, match="init_checkpoint"):
        load_config(values={"model": {"warm_start": {"episodes": 8},
                                      "init_checkpoint": "somewhere"}})


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("rl_*.yaml")), ids=lambda p: p.name)
def test_shipped_rl_configs_load(path):
    cfg = load_config(path)
    assert cfg.algorithm.total_steps > 0
    assert cfg.episodes_per_step >= cfg.algorithm.minibatch_size
