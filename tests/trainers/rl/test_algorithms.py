"""Advantages and losses against hand-computed numbers and straightforward reference loops."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from trainers.rl import algorithms as alg  # noqa: E402


def test_gae_skips_observation_tokens_hand_computed():
    # positions: prompt, gen, gen, obs, obs, gen, pad ; reward 1 on the last generated token
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 0]], dtype=torch.float32)
    values = torch.tensor([[7.0, 0.5, 0.2, 9.0, 9.0, 0.4, 3.0]])
    rewards = torch.tensor([[0, 0, 0, 0, 0, 1.0, 0]])
    adv, ret = alg.gae_advantages(rewards, values * mask, mask, gamma=0.9, lam=0.8)
    # compacted generated sequence v = (0.5, 0.2, 0.4), r = (0, 0, 1), terminal value 0:
    a5 = 1.0 - 0.4
    a2 = (0.9 * 0.4 - 0.2) + 0.9 * 0.8 * a5
    a1 = (0.9 * 0.2 - 0.5) + 0.9 * 0.8 * a2
    expected = torch.tensor([[0, a1, a2, 0, 0, a5, 0]])
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.allclose(ret, (expected + values) * mask, atol=1e-6)
    assert adv[0, 3] == 0 and adv[0, 4] == 0  # observation tokens get no advantage


def test_gae_gamma_lambda_one_is_reward_minus_value():
    mask = torch.tensor([[1, 1, 0, 1]], dtype=torch.float32)
    values = torch.tensor([[0.1, 0.3, 0.0, 0.6]])
    rewards = torch.tensor([[0, 0, 0, 2.0]])
    adv, _ = alg.gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    assert torch.allclose(adv, (2.0 - values) * mask)


def test_group_advantages_centre_and_scale_per_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = alg.group_advantages(rewards, groups, std_norm=True)
    first = torch.tensor([1.0, 0.0, 0.0, 0.0])
    expected = (first - first.mean()) / (first.std() + 1e-6)
    assert torch.allclose(adv[:4], expected, atol=1e-5)
    assert torch.all(adv[4:] == 0)  # an all-equal group carries no signal
    no_std = alg.group_advantages(rewards, groups, std_norm=False)
    assert torch.allclose(no_std[:4], first - 0.25)


def test_an_episode_split_into_segments_counts_once_in_its_group():
    """A gateway session whose template is not append-only is several rows (segments) of one
    episode: the group statistics are over episodes, and every segment gets its episode's
    advantage (3 segments of a reward-1 episode must not drag the mean to 0.75)."""
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 0, 0])
    episodes = torch.tensor([0, 0, 0, 1, 2, 3])  # 4 episodes: rewards 1, 0, 1, 0
    adv = alg.group_advantages(rewards, groups, std_norm=True, episode_ids=episodes)
    per_episode = torch.tensor([1.0, 0.0, 1.0, 0.0])
    expected = (per_episode - 0.5) / (per_episode.std() + 1e-6)
    assert torch.allclose(adv, expected[episodes], atol=1e-5)
    rows = alg.group_advantages(rewards, groups, std_norm=False)
    assert not torch.allclose(rows, alg.group_advantages(rewards, groups, std_norm=False, episode_ids=episodes))


def test_dynamic_sampling_drops_exactly_the_all_equal_groups():
    groups = [[1, 1, 1], [0, 1, 0], [0, 0, 0], [0.5, 0.5], [0.2, 0.2000001], []]
    assert alg.keep_informative_groups(groups) == [1, 4]


def _reference_clip_loss(logp, old, adv, mask, lo, hi):
    """Token-level DAPO loss written as plain loops, for comparison."""
    total, count, clipped = 0.0, 0, 0
    for i in range(len(logp)):
        for t in range(len(logp[i])):
            if not mask[i][t]:
                continue
            ratio = math.exp(logp[i][t] - old[i][t])
            surrogate = min(ratio * adv[i][t], min(max(ratio, 1 - lo), 1 + hi) * adv[i][t])
            total += -surrogate
            count += 1
            clipped += int(min(max(ratio, 1 - lo), 1 + hi) * adv[i][t] < ratio * adv[i][t])
    return total / count, clipped / count


def test_dapo_decoupled_clip_token_mean_matches_reference():
    gen = torch.Generator().manual_seed(0)
    logp = torch.randn(3, 6, generator=gen) * 0.5 - 1
    old = logp + torch.randn(3, 6, generator=gen) * 0.4
    adv = torch.randn(3, 6, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [0, 1, 1, 1, 0, 0]]).float()
    loss, stats = alg.policy_loss(logp, old, adv, mask, 0.2, 0.28, "token-mean")
    ref_loss, ref_clip = _reference_clip_loss(
        logp.tolist(), old.tolist(), adv.tolist(), mask.tolist(), 0.2, 0.28)
    assert float(loss) == pytest.approx(ref_loss, rel=1e-5)
    assert float(stats["clip_frac"]) == pytest.approx(ref_clip)


def test_token_mean_weighs_tokens_not_sequences():
    loss = torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]]).float()
    assert float(alg.aggregate(loss, mask, "token-mean")) == pytest.approx(7 / 5)
    assert float(alg.aggregate(loss, mask, "seq-mean-token-mean")) == pytest.approx((1 + 3) / 2)
    assert float(alg.aggregate(loss, mask, "seq-mean-token-sum")) == pytest.approx((4 + 3) / 2)


def test_clip_higher_lets_positive_advantage_ratio_grow_further():
    old = torch.zeros(1, 1)
    logp = torch.log(torch.tensor([[1.25]]))  # ratio 1.25: inside 1.28, outside 1.2
    adv = torch.ones(1, 1)
    mask = torch.ones(1, 1)
    logp_sym = logp.clone().requires_grad_(True)
    alg.policy_loss(logp_sym, old, adv, mask, 0.2, 0.2)[0].backward()
    logp_dapo = logp.clone().requires_grad_(True)
    alg.policy_loss(logp_dapo, old, adv, mask, 0.2, 0.28)[0].backward()
    assert logp_sym.grad.item() == 0.0  # clipped: no push beyond 1.2
    assert logp_dapo.grad.item() < 0.0  # still pushed up (loss decreases as logp rises)


def test_masked_tokens_carry_zero_gradient():
    gen = torch.Generator().manual_seed(1)
    logp = (torch.randn(2, 5, generator=gen) - 1).requires_grad_(True)
    old = logp.detach() + torch.randn(2, 5, generator=gen) * 0.1
    old[:, 2] = 50.0  # garbage behaviour logprobs on observation tokens must not matter
    ref = logp.detach() - 0.3
    values = torch.randn(2, 5, generator=gen).requires_grad_(True)
    adv = torch.randn(2, 5, generator=gen)
    mask = torch.tensor([[1, 1, 0, 0, 1], [0, 1, 0, 1, 1]]).float()
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        logp.grad = None
        values.grad = None
        pg, _ = alg.policy_loss(logp, old, adv * mask, mask, 0.2, 0.28, agg)
        kl = alg.aggregate(alg.kl_penalty(logp, ref, "k3"), mask, agg)
        vf, _ = alg.value_loss(values, values.detach() * 0, adv, mask, 0.2, agg)
        (pg + kl + vf).backward()
        assert torch.all(logp.grad[mask == 0] == 0)
        assert torch.all(values.grad[mask == 0] == 0)
        assert torch.any(logp.grad[mask == 1] != 0)


def test_kl_estimators():
    gen = torch.Generator().manual_seed(2)
    # samples from p = N-ish categorical: k1 and k3 estimate the same KL in expectation
    p = torch.tensor([0.6, 0.3, 0.1])
    q = torch.tensor([0.3, 0.3, 0.4])
    samples = torch.multinomial(p, 200_000, replacement=True, generator=gen)
    logp, logq = p.log()[samples], q.log()[samples]
    true_kl = float((p * (p / q).log()).sum())
    assert float(alg.kl_penalty(logp, logq, "k1").mean()) == pytest.approx(true_kl, abs=0.01)
    k3 = alg.kl_penalty(logp, logq, "k3")
    assert float(k3.mean()) == pytest.approx(true_kl, abs=0.01)
    assert torch.all(k3 >= 0)
    with pytest.raises(ValueError):
        alg.kl_penalty(logp, logq, "k4")


def test_k1_as_a_loss_has_no_expected_gradient_and_k2_has_the_kls():
    """Why the config refuses k1 in the loss: the gradient of E_π[log π - log q] estimated
    from samples of π is E_π[∇ log π] = 0, while KL(π||q) does have a gradient (k2's)."""
    gen = torch.Generator().manual_seed(3)
    theta = torch.tensor([0.5, 0.0, -0.5], requires_grad=True)
    logq = torch.tensor([0.3, 0.3, 0.4]).log()
    exact = torch.autograd.grad((theta.softmax(-1) * (theta.log_softmax(-1) - logq)).sum(),
                                theta)[0]
    samples = torch.multinomial(theta.detach().softmax(-1), 200_000, replacement=True,
                                generator=gen)

    def sampled_gradient(estimator: str) -> torch.Tensor:
        logp = theta.log_softmax(-1)[samples]
        return torch.autograd.grad(alg.kl_penalty(logp, logq[samples], estimator).mean(),
                                   theta)[0]

    assert sampled_gradient("k1").abs().max() < 0.01  # zero up to sampling noise
    assert exact.abs().max() > 0.1
    assert torch.allclose(sampled_gradient("k2"), exact, atol=0.01)


def test_dual_clip_caps_the_loss_of_negative_advantages_hand_computed():
    mask = torch.ones(1, 3)
    old = torch.zeros(1, 3)
    # ratios 50, 50, 0.5: a stale behaviour logprob makes the first two tokens 50x likelier
    logp = torch.tensor([[math.log(50.0), math.log(50.0), math.log(0.5)]], requires_grad=True)
    adv = torch.tensor([[-1.0, 2.0, -1.0]])
    loss, stats = alg.policy_loss(logp, old, adv, mask, 0.2, 0.28, "token-mean",
                                  clip_ratio_c=3.0)
    # token 1: max(50, 0.8) * 1 = 50 capped at 3; token 2: positive advantage, clipped to
    # -2 * 1.28; token 3: max(0.5, 0.8) * 1 = 0.8, under the cap
    assert float(loss.detach()) == pytest.approx((3.0 - 2.0 * 1.28 + 0.8) / 3)
    assert float(stats["dual_clip_frac"]) == pytest.approx(1 / 3)
    loss.backward()
    assert logp.grad[0, 0] == 0  # the capped token adds no gradient
    plain, _ = alg.policy_loss(logp.detach(), old, adv, mask, 0.2, 0.28, "token-mean")
    assert float(plain) == pytest.approx((50.0 - 2.0 * 1.28 + 0.8) / 3)  # off: unbounded


def test_value_loss_clips_against_old_values():
    values = torch.tensor([[1.0]])
    old = torch.tensor([[0.0]])
    ret = torch.tensor([[0.0]])
    loss, _ = alg.value_loss(values, old, ret, torch.ones(1, 1), clip=0.2)
    # unclipped error 1.0, clipped prediction 0.2 -> error 0.04; the max (pessimistic) wins
    assert float(loss) == pytest.approx(0.5)


# -- off-policy correction: w = π_prox / π_behav per token ---------------------------------
# behaviour probabilities 0.25, 0.4, 0.3 and proximal 0.5, 0.2, 0.9: w = 2, 0.5, 3
BEHAVIOUR = torch.log(torch.tensor([[0.25, 0.4, 0.3, 0.7]]))
PROXIMAL = torch.log(torch.tensor([[0.5, 0.2, 0.9, 0.1]]))
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the fourth token is an observation


@pytest.mark.parametrize(("estimator", "expected", "cut"), [
    ("behaviour", [1.0, 1.0, 1.0, 0.0], 0.0),
    ("tis", [2.0, 0.5, 2.5, 0.0], 1 / 3),  # truncated at the cap
    ("decoupled", [2.0, 0.5, 0.0, 0.0], 1 / 3),  # AReaL: above the cap, dropped
    ("mis", [2.0, 0.0, 0.0, 0.0], 2 / 3),  # masked outside [0.6, 2.5]
])
def test_importance_weights_hand_computed(estimator, expected, cut):
    weights, stats = alg.importance_weights(PROXIMAL, BEHAVIOUR, MASK, estimator, cap=2.5,
                                            floor=0.6)
    assert weights[0].tolist() == pytest.approx(expected if estimator != "behaviour"
                                                else [1.0, 1.0, 1.0, 0.0])
    assert float(stats["truncated_share"]) == pytest.approx(cut)
    assert float(stats["ratio_mean"]) == pytest.approx((2 + 0.5 + 3) / 3)
    assert float(stats["ratio_max"]) == pytest.approx(3.0)
    assert float(stats["ratio_min"]) == pytest.approx(0.5)
    # k1 estimate of KL(behaviour || learner): mean of log(0.25/0.5), log(0.4/0.2), log(0.3/0.9)
    assert float(stats["kl"]) == pytest.approx(-math.log(3) / 3, rel=1e-5)


def test_sequence_level_weight_is_the_geometric_mean_of_the_episode():
    weights, _ = alg.importance_weights(PROXIMAL, BEHAVIOUR, MASK, "tis", cap=2.5,
                                        level="sequence")
    geometric = (2 * 0.5 * 3) ** (1 / 3)  # 1.442, under the cap
    assert weights[0].tolist() == pytest.approx([geometric] * 3 + [0.0])
    capped, _ = alg.importance_weights(PROXIMAL, BEHAVIOUR, MASK, "tis", cap=1.2,
                                       level="sequence")
    assert capped[0].tolist() == pytest.approx([1.2] * 3 + [0.0])


def test_weighted_policy_loss_hand_computed_and_weights_carry_no_gradient():
    """At θ = proximal every ratio is 1, so each token's loss is -A times its weight:
    TIS weights 2, 0.5, 2.5 and advantages 1, 2, -1 give (-2 - 1 + 2.5) / 3."""
    logp = PROXIMAL.clone().requires_grad_(True)
    proximal = PROXIMAL.clone().requires_grad_(True)
    weights, _ = alg.importance_weights(proximal, BEHAVIOUR, MASK, "tis", cap=2.5)
    assert not weights.requires_grad
    adv = torch.tensor([[1.0, 2.0, -1.0, 5.0]])
    loss, _ = alg.policy_loss(logp, proximal.detach(), adv, MASK, 0.2, 0.28, "token-mean",
                              weights=weights)
    assert loss.item() == pytest.approx((-2 - 1 + 2.5) / 3)
    loss.backward()
    # d/dlogp of -A * w * exp(logp - prox) at logp = prox: -A * w / 3 (token-mean)
    assert logp.grad[0].tolist() == pytest.approx([-2 / 3, -1 / 3, 2.5 / 3, 0.0])


def test_unknown_importance_estimator_is_refused():
    with pytest.raises(ValueError, match="importance estimator"):
        alg.importance_weights(PROXIMAL, BEHAVIOUR, MASK, "vtrace")
