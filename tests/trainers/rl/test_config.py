"""RLConfig: sections, algorithm presets resolved at load time, validation that says what to
change, YAML + overrides through the shared loader."""

from __future__ import annotations

import json
import re

import pytest

from trainers.rl.config import ConfigError, RLConfig, load_config


def test_presets_differ_only_where_the_algorithms_do():
    dapo = load_config(values={"algorithm.name": "dapo"}).algorithm
    assert (dapo.clip_eps_low, dapo.clip_eps_high) == (0.2, 0.28)
    assert dapo.loss_agg == "token-mean" and dapo.dynamic_sampling and dapo.kl_coef == 0
    assert dapo.critic == "none" and dapo.group_size == 8
    grpo_cfg = load_config(values={"algorithm.name": "grpo"})
    grpo = grpo_cfg.algorithm
    assert grpo.clip_eps_high == 0.2 and grpo.kl_coef > 0 and grpo_cfg.uses_reference
    assert not grpo.dynamic_sampling and grpo.loss_agg == "seq-mean-token-mean"
    ppo_cfg = load_config(values={"algorithm": {"name": "ppo", "minibatch_size": 4},
                                  "resources.micro_batch_size": 4})
    assert ppo_cfg.algorithm.critic == "value_head" and ppo_cfg.uses_critic
    assert ppo_cfg.algorithm.group_size == 1


def test_a_loaded_config_holds_concrete_values_only():
    """No field left for a preset to decide later: DAPO's overlong buffer is a number of
    tokens (a quarter of the response budget), critic_lr follows lr, and the defaults of the
    dataclass are the DAPO preset's."""
    cfg = load_config(values={"rollout.max_response_tokens": 160, "algorithm.lr": 3e-4})
    assert cfg.algorithm.overlong_buffer == 40 and isinstance(cfg.algorithm.overlong_buffer, int)
    assert cfg.algorithm.critic_lr == pytest.approx(3e-4)
    assert load_config() == RLConfig()

    def leaves(node):
        for value in node.values():
            yield from leaves(value) if isinstance(value, dict) else [value]

    assert all(isinstance(v, int | float | str | bool | dict | list | type(None))
               for v in leaves(cfg.to_dict()))
    # what config.json holds loads back to the same config
    assert load_config(values=json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_explicit_values_beat_presets():
    cfg = load_config(values={"algorithm": {"name": "dapo", "clip_eps_high": 0.3,
                                            "dynamic_sampling": False, "kl_coef": 0.01}})
    assert cfg.algorithm.clip_eps_high == 0.3 and not cfg.algorithm.dynamic_sampling
    assert cfg.uses_reference


@pytest.mark.parametrize(
    ("values", "hint"),
    [
        ({"algorithm": {"name": "ppo", "critic": "none", "minibatch_size": 4}},
         "algorithm.critic=value_head"),
        ({"algorithm": {"name": "grpo", "critic": "value_head"}}, "algorithm.critic=none"),
        ({"algorithm": {"name": "dapo", "group_size": 1, "minibatch_size": 4},
          "resources.micro_batch_size": 4}, "algorithm.group_size"),
        ({"algorithm": {"name": "ppo", "dynamic_sampling": True, "minibatch_size": 4}},
         "dynamic_sampling"),
        ({"algorithm.clip_eps_high": 1.5}, "clip_eps_high"),
        ({"algorithm.minibatch_size": 1000}, "algorithm.minibatch_size"),
        ({"rollout.temperature": 0.0}, "rollout.temperature"),
        ({"algorithm.name": "reinforce"}, "choose one of dapo, grpo, ppo"),
        ({"rollout.engine": "vllm"}, "resources.num_gpus"),
        ({"algorithm.loss_agg": "mean"}, "'token-mean', 'seq-mean-token-mean'"),
        ({"rollout.max_response_tokens": 64, "algorithm.overlong_buffer": 64}, "overlong_buffer"),
        ({"bookkeeping.resume": True}, "resume: latest"),
        ({"rollout.pipeline": True}, "algorithm.max_staleness: 1"),
        ({"algorithm": {"importance_correction": "tis", "importance_cap": 1.0}},
         "algorithm.importance_cap=1.0"),
        ({"health.alarms": [{"name": "x", "metric": "m", "kind": "diverge"}]}, "needs `against`"),
        ({"algorithm.max_staleness": -1}, "algorithm.max_staleness=-1 must be >= 0"),
    ],
)
def test_impossible_combinations_are_rejected_with_the_fix(values, hint):
    with pytest.raises(ConfigError, match=re.escape(hint)):
        load_config(values=values)


def test_sections_validate_when_built_in_python_too():
    from trainers.rl.sections import RolloutSection

    with pytest.raises(ConfigError, match=re.escape("rollout.temperature")):
        RolloutSection(temperature=0.0)
    assert RolloutSection(temperature="0.7").temperature == 0.7  # a numeric string is a number
    with pytest.raises(ConfigError, match=re.escape("rollout.engine='sglang': choose one of 'hf', 'vllm'")):
        RolloutSection(engine="sglang")


def test_yaml_plus_overrides(tmp_path):
    path = tmp_path / "rl.yaml"
    # YAML 1.1 reads 1e-4 (no dot) as a string; the loader reads it as the number it is,
    # nested sections (warm_start) included
    path.write_text("algorithm: {name: dapo, lr: 1e-4}\nenv:\n  max_turns: 3\n"
                    "  kwargs: {task_options: {num_tasks: 4}}\n"
                    "model:\n  warm_start: {episodes: 8, learning_rate: 5e-3}\n")
    cfg = load_config(path)
    assert cfg.algorithm.lr == pytest.approx(1e-4) and cfg.env.max_turns == 3
    assert cfg.model.warm_start.learning_rate == pytest.approx(5e-3)
    cfg = load_config(path, ["algorithm.name=grpo", "algorithm.lr=2e-5",
                             "env.kwargs.task_options={difficulty: easy}",
                             "resources.use_ray=false", "model.warm_start.learning_rate=2e-5"])
    assert cfg.algorithm.name == "grpo" and cfg.algorithm.lr == pytest.approx(2e-5)
    assert cfg.resources.use_ray is False and cfg.model.warm_start.learning_rate == 2e-5
    assert cfg.env.kwargs == {"task_options": {"num_tasks": 4, "difficulty": "easy"}}


def test_unknown_and_moved_keys_fail_loudly(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("unknown key 'algorithm.learning_rate'")):
        load_config(overrides=["algorithm.learning_rate=1"])
    with pytest.raises(ConfigError, match=re.escape("lr moved to algorithm.lr")):
        load_config(overrides=["lr=1e-5"])
    with pytest.raises(ConfigError, match=re.escape("env_kwargs moved to env.kwargs")):
        load_config(values={"env_kwargs": {}})
    with pytest.raises(ConfigError, match=r"algorithm: \{name: ppo\}"):
        load_config(overrides=["algorithm=ppo"])
    path = tmp_path / "rl.yaml"
    path.write_text("algoritm: {name: dapo}\n")
    with pytest.raises(ConfigError, match="algoritm"):
        load_config(path)
    with pytest.raises(ConfigError, match="key=value"):
        load_config(overrides=["algorithm.lr"])
