"""RL rollout workers stepping a served env (``env.url``) train exactly as with in-process envs."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("websockets", reason="coa serve-env needs the [serve] extra")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.service.servers import serve
from trainers.common import ConfigError
from trainers.rl.config import RLConfig, load_config

SERVER_SIDE = {"task_options": {"difficulty": "easy", "num_tasks": 16},
               "tools": {"wiki_search": {"backend": "bm25", "top_k": 1}}}
CLIENT_SIDE = {"system_prompt": "Search the wiki, then answer."}
COMPARED = ("rollout/reward_mean", "rollout/tool_calls", "policy/entropy", "loss/policy", "eval/heldout_reward_mean")


def _config(out, env: dict) -> RLConfig:
    return load_config(values={
        "algorithm": {"name": "dapo", "total_steps": 2, "prompts_per_step": 2, "group_size": 2, "minibatch_size": 4,
                      "lr": 1e-3, "dynamic_sampling": False, "entropy_coef": 0.01},
        "model": {"path": "tiny", "config_overrides": {"hidden_size": 32, "layers": 1}},
        "env": {"id": "coa/SynthHop-v0", "max_turns": 2, **env},
        "rollout": {"max_new_tokens": 8, "max_response_tokens": 48},
        "resources": {"use_ray": False, "torch_threads": 1, "micro_batch_size": 2},
        "bookkeeping": {"save_every": 2, "output_dir": str(out), "tensorboard": False, "plot": False,
                        "eval_every": 2, "eval_episodes": 4}})


def _metrics(out) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: row[k] for k in COMPARED if k in row} | {"step": row["step"]} for row in rows]


def test_training_on_a_served_env_matches_training_in_process(tmp_path):
    from trainers.rl.loop import train
    from trainers.rl.rollout import make_env

    local_out, remote_out = tmp_path / "local", tmp_path / "remote"
    local_kwargs = {**SERVER_SIDE, **CLIENT_SIDE}
    train(_config(local_out, {"kwargs": local_kwargs}))
    with serve(["coa/SynthHop-v0"], overrides=SERVER_SIDE) as url:
        remote = _config(remote_out, {"kwargs": CLIENT_SIDE, "url": url})
        env = make_env(remote)
        assert type(env.unwrapped).__name__ == "RemoteEnv" and len(env.unwrapped.tasks) == 13  # split=train
        env.close()
        train(remote)
    local, served = _metrics(local_out), _metrics(remote_out)
    assert [m["step"] for m in served] == [0, 1, 2]
    assert served == local  # same tasks, same observations, same rewards: the same run


def test_env_url_must_be_a_url():
    with pytest.raises(ConfigError, match=r"env\.url"):
        load_config(values={"env": {"url": "localhost:8100"}})
