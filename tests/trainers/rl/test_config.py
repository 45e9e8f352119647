"""RLConfig: algorithm presets, validation that says what to change, YAML + overrides."""

from __future__ import annotations

import pytest

from trainers.rl.config import ConfigError, RLConfig, apply_overrides, load_config


def test_presets_differ_only_where_the_algorithms_do():
    dapo = RLConfig(algorithm="dapo")
    assert (dapo.clip_eps_low, dapo.clip_eps_high) == (0.2, 0.28)
    assert dapo.loss_agg == "token-mean" and dapo.dynamic_sampling and dapo.kl_coef == 0
    assert dapo.critic == "none" and dapo.group_size == 8
    assert dapo.overlong_buffer == dapo.max_response_tokens // 4
    grpo = RLConfig(algorithm="grpo")
    assert grpo.clip_eps_high == 0.2 and grpo.kl_coef > 0 and grpo.uses_reference
    assert not grpo.dynamic_sampling and grpo.loss_agg == "seq-mean-token-mean"
    ppo = RLConfig(algorithm="ppo", minibatch_size=4, micro_batch_size=4)
    assert ppo.critic == "value_head" and ppo.uses_critic and ppo.group_size == 1


def test_explicit_values_beat_presets():
    cfg = RLConfig(algorithm="dapo", clip_eps_high=0.3, dynamic_sampling=False, kl_coef=0.01)
    assert cfg.clip_eps_high == 0.3 and not cfg.dynamic_sampling and cfg.uses_reference


@pytest.mark.parametrize(
    ("kwargs", "hint"),
    [
        ({"algorithm": "ppo", "critic": "none", "minibatch_size": 4}, "critic"),
        ({"algorithm": "grpo", "critic": "value_head"}, "critic=none"),
        ({"algorithm": "dapo", "group_size": 1, "minibatch_size": 4, "micro_batch_size": 4},
         "group_size"),
        ({"algorithm": "ppo", "dynamic_sampling": True, "minibatch_size": 4}, "dynamic_sampling"),
        ({"algorithm": "dapo", "clip_eps_high": 1.5}, "clip_eps_high"),
        ({"algorithm": "dapo", "minibatch_size": 1000}, "minibatch_size"),
        ({"algorithm": "dapo", "temperature": 0.0}, "temperature"),
        ({"algorithm": "reinforce"}, "algorithm"),
        ({"algorithm": "dapo", "rollout_engine": "vllm"}, "vllm"),
    ],
)
def test_impossible_combinations_are_rejected_with_the_fix(kwargs, hint):
    with pytest.raises(ConfigError, match=hint):
        RLConfig(**kwargs)


def test_yaml_plus_overrides(tmp_path):
    path = tmp_path / "rl.yaml"
    path.write_text("algorithm: dapo\nlr: 1e-4\nenv_kwargs:\n  max_turns: 3\n")
    assert load_config(path).lr == pytest.approx(1e-4)
    cfg = load_config(path, ["algorithm=grpo", "lr=2e-5", "env_kwargs.task_options={difficulty: easy}",
                             "use_ray=false"])
    assert cfg.algorithm == "grpo" and cfg.lr == pytest.approx(2e-5) and cfg.use_ray is False
    assert cfg.env_kwargs == {"max_turns": 3, "task_options": {"difficulty": "easy"}}


def test_unknown_keys_fail_loudly(tmp_path):
    with pytest.raises(ConfigError, match="unknown"):
        apply_overrides({}, ["learning_rate=1"])
    path = tmp_path / "rl.yaml"
    path.write_text("algoritm: dapo\n")
    with pytest.raises(ConfigError, match="algoritm"):
        load_config(path)
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["lr"])
