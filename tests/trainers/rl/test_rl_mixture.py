"""RL on a mixture of envs: groups drawn by weight (one task of one env each), per-env
metrics and held-out eval, per-env curves in the PNG, exact resume, config errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainers.common import ConfigError, deep_merge  # noqa: E402
from trainers.rl.config import RLConfig, load_config  # noqa: E402

SYNTHHOP = {"task_options": {"difficulty": "easy", "num_tasks": 16},
            "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}},
            "system_prompt": "Search the wiki, then answer."}
NQ = {"task_options": {"limit": 40}, "system_prompt": "Answer the question."}


def _config(out: Path, **overrides) -> RLConfig:
    base = {
        "algorithm": {"name": "dapo", "total_steps": 4, "prompts_per_step": 3, "group_size": 2,
                      "minibatch_size": 6, "lr": 1e-3, "dynamic_sampling": False,
                      "entropy_coef": 0.01},
        "model": {"path": "tiny", "config_overrides": {"hidden_size": 32, "layers": 1}},
        "env": {"envs": [{"id": "coa/SynthHop-v0", "weight": 0.6, "env_kwargs": SYNTHHOP},
                         {"id": "coa/NQ-v1", "weight": 0.4, "env_kwargs": NQ}],
                "max_turns": 2},
        "rollout": {"max_new_tokens": 8, "max_response_tokens": 48},
        "resources": {"use_ray": False, "torch_threads": 1, "micro_batch_size": 3},
        "bookkeeping": {"save_every": 2, "output_dir": str(out), "tensorboard": False,
                        "plot": True, "eval_every": 2, "eval_episodes": 3},
    }
    return load_config(values=deep_merge(base, overrides))


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_groups_are_one_task_of_one_env_drawn_by_weight(tmp_path):
    from trainers.rl.actors import LocalRollouts
    from trainers.rl.loop import collect_groups, make_samplers

    cfg = _config(tmp_path, **{"algorithm.prompts_per_step": 6})
    rollouts = LocalRollouts(cfg)
    try:
        samplers = make_samplers(cfg, rollouts)
        assert [s.num_tasks for s in samplers] == [13, 40]  # SynthHop: 16 - 3 held out; NQ: limit
        batches = [collect_groups(cfg, samplers, rollouts, step) for step in (1, 2)]
    finally:
        rollouts.close()
    envs = []
    for batch in batches:
        for group in batch.groups:
            assert len({(t.env_id, t.task_id) for t in group}) == 1
            envs.append(group[0].env_id)
        drawn = {k: v for k, v in batch.stats.items() if k.startswith("sampling/")
                 and k.endswith("/groups")}
        assert set(drawn) == {"sampling/SynthHop-v0/groups", "sampling/NQ-v1/groups"}
        assert sum(drawn.values()) == 6
        kept = [batch.stats[f"sampling/{name}/groups_kept"] for name in ("SynthHop-v0", "NQ-v1")]
        assert kept == [sum(1 for g in batch.groups if g[0].env_id == f"coa/{name}")
                        for name in ("SynthHop-v0", "NQ-v1")]
    assert set(envs) == {"coa/SynthHop-v0", "coa/NQ-v1"}
    assert set(batches[-1].sampler_state) == {"SynthHop-v0", "NQ-v1"}


def test_mixture_run_logs_per_env_metrics_plots_them_and_resumes_exactly(tmp_path):
    from trainers.rl.loop import train

    straight = tmp_path / "straight"
    last = train(_config(straight))
    rows = _rows(straight)
    train_rows = [r for r in rows if "rollout/reward_mean" in r]
    assert len(train_rows) == 4
    for row in train_rows:  # every step logs the envs it drew groups of
        for name in ("SynthHop-v0", "NQ-v1"):
            if row[f"sampling/{name}/groups"]:
                assert f"rollout/{name}/reward_mean" in row
                assert row[f"rollout/{name}/episodes"] == 2 * row[f"sampling/{name}/groups"]
    evals = [r for r in rows if "eval/heldout_reward_mean" in r]
    assert [e["step"] for e in evals] == [0, 2, 4]
    for e in evals:  # each env scored on its own held-out tasks
        assert e["eval/SynthHop-v0/heldout_episodes"] == 3
        assert e["eval/NQ-v1/heldout_episodes"] == 3
        assert e["eval/SynthHop-v0/heldout_tasks"] == 3  # 16 SynthHop tasks: 3 held out
        assert e["eval/heldout_episodes"] == 6
    assert "rollout/SynthHop-v0/reward_mean" in last or "rollout/NQ-v1/reward_mean" in last
    assert (straight / "reward_curve.png").stat().st_size > 1000
    state = json.loads((straight / "checkpoint-2" / "trainer_state.json").read_text())
    assert set(state["samplers"]) == {"SynthHop-v0", "NQ-v1"}

    interrupted = tmp_path / "interrupted"
    train(_config(interrupted), stop_after=2)
    train(_config(interrupted, **{"bookkeeping.resume": "latest"}))
    keys = ("rollout/reward_mean", "sampling/SynthHop-v0/groups", "sampling/NQ-v1/groups")
    assert [[r.get(k) for k in keys] for r in _rows(interrupted) if "rollout/reward_mean" in r] \
        == [[r.get(k) for k in keys] for r in train_rows]
    from safetensors.torch import load_file

    a = load_file(str(next((straight / "final").glob("*.safetensors"))))
    b = load_file(str(next((interrupted / "final").glob("*.safetensors"))))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_each_env_trains_on_its_train_side_and_is_evaluated_on_its_test_side(tmp_path):
    from trainers.rl.rollout import make_env

    cfg = _config(tmp_path)
    for index, expected in ((0, (13, 3)), (1, (40, 40))):  # NQ: limit applies per side
        train_env, eval_env = make_env(cfg, env_index=index), make_env(cfg, True, index)
        try:
            train_ids = {t.task_id for t in train_env.unwrapped.tasks}
            eval_ids = {t.task_id for t in eval_env.unwrapped.tasks}
            assert (len(train_ids), len(eval_ids)) == expected
            assert not train_ids & eval_ids
        finally:
            train_env.close()
            eval_env.close()


@pytest.mark.parametrize(("env", "message"), [
    ({"id": "coa/NQ-v1", "envs": [{"id": "coa/SynthHop-v0"}]}, "drop env.id and env.kwargs"),
    ({"envs": [{"id": "coa/SynthHop-v0"}, {"id": "coa/NotAnEnv-v0"}]},
     "env.envs: unknown env id 'coa/NotAnEnv-v0'"),
    ({"envs": [{"id": "coa/SynthHop-v0", "weight": 0}, {"id": "coa/NQ-v1", "weight": 0}]},
     "the weights sum to 0; they must sum to a positive number"),
    ({"envs": [{"id": "coa/SynthHop-v0", "weight": -0.5}]}, "must be a number >= 0"),
    ({"envs": [{"id": "coa/NQ-v1", "env_kwargs": {"task_options": {"split": "test"}}}]},
     "env.envs[].env_kwargs.task_options.split='test'"),
])
def test_mixture_config_errors(env, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(values={"env": env, "bookkeeping": {"eval_every": 1}})
