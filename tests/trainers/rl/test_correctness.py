"""Issue 23: the learner trains every episode, computes in bf16/fp16 without losing updates,
clips actor and critic apart, scores logprobs in eval mode through the model's own forward,
and follows an LR schedule. Each test failed on the code before the fix."""

from __future__ import annotations

from itertools import pairwise

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agents.trajectory import Trajectory  # noqa: E402
from trainers.common import ConfigError, deep_merge  # noqa: E402
from trainers.rl.batch import collate  # noqa: E402
from trainers.rl.config import load_config  # noqa: E402
from trainers.rl.synthetic import random_batch  # noqa: E402


def _config(**overrides):
    base = {"algorithm": {"name": "dapo", "prompts_per_step": 2, "group_size": 4,
                          "minibatch_size": 4, "lr": 1e-2},
            "model": {"path": "tiny", "config_overrides": {"hidden_size": 32, "layers": 1}},
            "resources": {"use_ray": False, "micro_batch_size": 2, "torch_threads": 1}}
    return load_config(values=deep_merge(base, overrides))


def _learner(**overrides):
    from trainers.rl.learner import Learner

    torch.set_num_threads(1)
    return Learner(_config(**overrides))


def _batch(vocab: int, episodes: int, seed: int = 0, group: int = 4):
    """Random multi-turn episodes with engine logprobs and alternating rewards."""
    return random_batch(vocab, episodes, seed=seed, group=group, prompt_len=5,
                        generated_len=lambda i, turn: 3 + (i + turn) % 4, observation_len=4)


def test_a_ragged_last_minibatch_is_trained_not_dropped(monkeypatch):
    """7 episodes, minibatch 4: before, the 3-episode tail was skipped every epoch."""
    from trainers.rl import learner as learner_module

    learner = _learner(**{"algorithm": {"minibatch_size": 4, "ppo_epochs": 2},
                          "resources.micro_batch_size": 4})
    batch = _batch(learner.policy.config.vocab_size, episodes=7)
    entered = []
    real = learner_module.alg.policy_loss

    def counting(logprobs, old, adv, mask, *args, **kwargs):
        entered.append(float(mask.sum()))
        return real(logprobs, old, adv, mask, *args, **kwargs)

    monkeypatch.setattr(learner_module.alg, "policy_loss", counting)
    prepared, _ = learner.prepare(batch)
    stats = learner.update(prepared)
    generated = float(batch.mask.sum())
    assert sum(entered) == pytest.approx(2 * generated)  # every generated token, each epoch
    assert stats["train/loss_tokens"] == pytest.approx(generated)
    assert stats["train/loss_episodes"] == 7


def _deltas(learner, before):
    return torch.cat([(p.detach().float() - before[n]).flatten()
                      for n, p in learner.policy.named_parameters()])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_learner_updates_like_fp32(dtype):
    """At lr 1e-5 a bf16 weight step rounds away (a weight of 0.02 has a bf16 spacing of
    ~1e-4); fp32 master weights under autocast keep it. fp16 adds loss scaling."""
    settings = {"algorithm": {"lr": 1e-5, "minibatch_size": 8, "prompts_per_step": 2}}
    reference = _learner(**settings)
    low = _learner(**settings, **{"model.dtype": dtype})
    batch = _batch(reference.policy.config.vocab_size, episodes=8, seed=1)
    moved = {}
    for name, learner in (("fp32", reference), (dtype, low)):
        before = {n: p.detach().float().clone() for n, p in learner.policy.named_parameters()}
        prepared, _ = learner.prepare(batch)
        stats = learner.update(prepared)
        moved[name] = _deltas(learner, before)
    assert all(p.dtype == torch.float32 for p in low.policy.parameters())  # masters
    assert next(iter(low.policy_state().values())).dtype == getattr(torch, dtype)  # engines
    cosine = torch.nn.functional.cosine_similarity(moved["fp32"], moved[dtype], dim=0)
    ratio = moved[dtype].norm() / moved["fp32"].norm()
    assert float(cosine) > 0.95 and 0.9 < float(ratio) < 1.1, (float(cosine), float(ratio))
    if dtype == "float16":
        assert stats["policy/loss_scale"] > 1  # dynamic loss scaling is on


def test_actor_and_critic_gradients_are_clipped_apart():
    """A fresh value head with large returns has a large gradient; clipped together with the
    policy it used to shrink the policy's gradient (and so its step)."""
    policy_grads = {}
    for vf_coef in (0.5, 500.0):
        learner = _learner(**{"algorithm": {"name": "ppo", "group_size": 1, "prompts_per_step": 8,
                                            "vf_coef": vf_coef, "max_grad_norm": 0.5,
                                            "critic_max_grad_norm": 0.5}})
        batch = _batch(learner.policy.config.vocab_size, episodes=4, seed=2)
        batch.rewards *= 100.0
        batch.token_rewards *= 100.0
        prepared, _ = learner.prepare(batch)
        stats = learner._minibatch_step(prepared, float(prepared.mask.sum()), prepared.size)
        assert stats["critic/grad_norm"] > 0.5  # the value head's own norm, before clipping
        policy_grads[vf_coef] = torch.cat([p.grad.flatten() for p in learner.policy.parameters()
                                           if p.grad is not None])
    # zero-initialised head: no value gradient reaches the trunk yet, so the policy's clipped
    # gradient is the same whatever the value loss weighs
    assert torch.allclose(policy_grads[0.5], policy_grads[500.0], rtol=1e-4, atol=1e-12)


def test_k1_kl_in_the_loss_is_refused_and_dual_clip_is_validated():
    with pytest.raises(ConfigError, match="zero expected gradient"):
        _config(**{"algorithm": {"name": "grpo", "kl_coef": 0.01, "kl_estimator": "k1"}})
    assert _config(**{"algorithm": {"name": "grpo", "kl_coef": 0.01,
                                    "kl_estimator": "k2"}}).algorithm.kl_estimator == "k2"
    with pytest.raises(ConfigError, match="clip_ratio_c"):
        _config(**{"algorithm.clip_ratio_c": 0.5})


def test_logprob_recompute_runs_with_dropout_off():
    """The engine samples in eval mode; the learner's recompute (the mismatch metric and the
    old logprobs of text-only episodes) must score the same policy, not a dropout draw."""
    from agents.engines import GenerationRequest, SamplingParams, build_engine

    learner = _learner(**{"model.config_overrides": {"hidden_size": 32, "layers": 1,
                                                     "attention_dropout": 0.5}})
    engine = build_engine("hf", model=learner.policy, tokenizer=learner.tokenizer)
    trajectories = []
    for i in range(4):
        done = engine.generate([GenerationRequest(token_ids=(1, 2, 3, 4 + i))],
                               SamplingParams(max_new_tokens=6, seed=i, stop=()))[0]
        t = Trajectory(env_id="t", task_id=str(i), prompt_ids=[1, 2, 3, 4 + i], reward=float(i % 2))
        t.add_generated(done.text, done.token_ids, done.logprobs)
        trajectories.append(t)
    learner.module.train()  # as the learner holds it between updates
    batch = collate(trajectories, [t.reward for t in trajectories], [0, 0, 1, 1])
    _, first = learner.prepare(batch)
    _, second = learner.prepare(batch)
    assert first["mismatch/logprob_abs_diff"] < 1e-4
    assert first["mismatch/logprob_abs_diff"] == second["mismatch/logprob_abs_diff"]
    assert learner.module.training  # back in train mode for the update


def test_logits_go_through_the_models_own_forward_softcapping_included():
    """Gemma-2 softcaps its final logits inside ``forward``; the learner scored
    ``lm_head(hidden)`` and missed it, while engines (model forward) applied it."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from trainers.rl.models import ValueHead, forward_tokens

    torch.manual_seed(0)
    model = Gemma2ForCausalLM(Gemma2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        final_logit_softcapping=1.5)).eval()
    ids = torch.randint(0, 64, (2, 9))
    attention = torch.ones_like(ids)
    head = ValueHead(32)
    torch.nn.init.normal_(head.weight)
    with torch.no_grad():
        out = forward_tokens(model, ids, attention, head, temperature=0.7)
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float() / 0.7
        expected = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        hidden = model.model(input_ids=ids, attention_mask=attention).last_hidden_state
    assert torch.allclose(out.logprobs, expected, atol=1e-5)
    assert torch.allclose(out.values, head(hidden[:, :-1]).squeeze(-1), atol=1e-5)


def test_lr_warms_up_then_decays():
    from trainers.rl.optim import lr_factor

    assert [lr_factor(k, 6, 2, "constant") for k in range(6)] == [0.5, 1, 1, 1, 1, 1]
    assert [lr_factor(k, 6, 2, "linear") for k in range(6)] == [0.5, 1, 1, 0.75, 0.5, 0.25]
    cosine = [lr_factor(k, 6, 0, "cosine") for k in range(6)]
    assert cosine[0] == 1 and all(b < a for a, b in pairwise(cosine))
    learner = _learner(**{"algorithm": {"lr": 1e-3, "lr_warmup_steps": 2, "lr_schedule": "linear",
                                        "total_steps": 4}})
    batch = _batch(learner.policy.config.vocab_size, episodes=8, seed=3)
    used = []
    for _ in range(3):
        prepared, _ = learner.prepare(batch)
        used.append(learner.update(prepared)["policy/lr"])
    assert used == pytest.approx([5e-4, 1e-3, 1e-3])
