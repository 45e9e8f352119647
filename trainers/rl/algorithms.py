"""Advantage estimators and losses for PPO, GRPO and DAPO, as pure tensor functions.

Every tensor here is *target-aligned*: shape ``[batch, T]`` where position ``t`` is the
token the model predicted at that step. ``mask`` is 1 on tokens the policy generated and
0 on prompt, observation and padding tokens, so observation tokens never carry advantage,
loss or gradient: every reduction below goes through the mask.
No model code and no I/O: this is the part tests compare with hand-computed numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "aggregate",
    "entropy_from_logits",
    "gae_advantages",
    "group_advantages",
    "importance_weights",
    "keep_informative_groups",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "policy_loss",
    "value_loss",
]


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over positions where ``mask`` is 1 (0 when nothing is masked in)."""
    total = (values * mask).sum() if dim is None else (values * mask).sum(dim)
    count = mask.sum() if dim is None else mask.sum(dim)
    return total / count.clamp(min=1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Zero-mean unit-variance over masked-in positions; masked-out positions become 0."""
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    return (values - mean) * (var + eps).rsqrt() * mask


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(γ, λ) over generated tokens only; returns ``(advantages, returns)``.

    The recursion runs right to left and *skips* positions with ``mask == 0``: an
    observation span between two turns is not an action, so the value after the last
    token of turn k is the value at the first token of turn k+1, with no discount for the
    skipped observation tokens. The value after the final generated token is 0 (terminal).
    """
    import torch

    batch, length = rewards.shape
    advantages = torch.zeros_like(values)
    next_value = torch.zeros(batch, dtype=values.dtype, device=values.device)
    next_adv = torch.zeros_like(next_value)
    for t in range(length - 1, -1, -1):
        active = mask[:, t] > 0
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        advantages[:, t] = torch.where(active, adv_t, torch.zeros_like(adv_t))
        next_value = torch.where(active, values[:, t], next_value)
        next_adv = torch.where(active, adv_t, next_adv)
    returns = (advantages + values) * mask
    return advantages * mask, returns


def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, std_norm: bool = True, eps: float = 1e-6,
    episode_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """GRPO: each episode's reward minus its group's mean (divided by the group's std).

    ``rewards`` and ``group_ids`` are per row (shape ``[batch]``); the result is per row and
    the caller broadcasts it over that row's generated tokens. A row is an episode, or with
    ``episode_ids`` one token-exact segment of one: an episode split into three segments
    would otherwise count three times in its group's mean and std, so the statistics are
    taken over episodes (each episode's rows share its reward) and every row of an episode
    gets the episode's advantage.
    """
    import torch

    out = torch.zeros_like(rewards)
    for group in torch.unique(group_ids):
        members = group_ids == group
        scores = rewards[members]
        if episode_ids is not None:
            episodes, row_episode = torch.unique(episode_ids[members], return_inverse=True)
            scores = torch.zeros(len(episodes), dtype=rewards.dtype, device=rewards.device).scatter(
                0, row_episode, scores)
        centred = rewards[members] - scores.mean()
        if std_norm and scores.numel() > 1:
            centred = centred / (scores.std(unbiased=True) + eps)
        out[members] = centred
    return out


def keep_informative_groups(group_rewards: Sequence[Sequence[float]], tol: float = 1e-9) -> list[int]:
    """DAPO dynamic sampling: indices of groups whose rewards are *not* all equal.

    An all-equal group has zero group-relative advantage everywhere, so it adds no
    gradient and only dilutes a token-mean loss.
    """
    keep = []
    for index, rewards in enumerate(group_rewards):
        if rewards and max(rewards) - min(rewards) > tol:
            keep.append(index)
    return keep


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str, norm_tokens: float | None = None
              ) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    token-mean (DAPO): every generated token in the batch weighs the same, so long
    responses are not down-weighted. ``norm_tokens`` lets gradient accumulation divide by
    the token count of the whole minibatch rather than of one micro-batch.
    seq-mean-token-mean (GRPO): mean per episode, then mean over episodes.
    seq-mean-token-sum: sum per episode, mean over episodes.
    """
    if mode == "token-mean":
        denom = mask.sum().clamp(min=1) if norm_tokens is None else norm_tokens
        return (loss * mask).sum() / denom
    if mode == "seq-mean-token-mean":
        per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_seq.mean()
    if mode == "seq-mean-token-sum":
        return (loss * mask).sum(-1).mean()
    raise ValueError(f"unknown loss aggregation {mode!r}")


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps_low: float,
    clip_eps_high: float,
    loss_agg: str = "token-mean",
    norm_tokens: float | None = None,
    clip_ratio_c: float = 0.0,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate with decoupled bounds ``[1 - ε_low, 1 + ε_high]`` (DAPO clip-higher;
    PPO/GRPO use ε_low = ε_high). ``old_logprobs`` anchor the ratio: the behaviour policy's
    (the rollout engine's) logprobs of the sampled tokens, or with an off-policy correction
    the proximal policy's (:func:`importance_weights`), whose per-token ``weights`` then
    multiply each token's clipped loss. Returns the loss and detached statistics.

    Dual clip (``clip_ratio_c`` > 1, Ye et al. 2020): for a negative advantage the clipped
    surrogate ``-A * max(r, 1 - ε_low)`` grows without bound in ``r``; a token the behaviour
    policy found unlikely but the current policy likes (stale or mismatched rollout
    logprobs: r = 50) would dominate the batch. Its loss is capped at ``-A * c``, so such a
    token adds no gradient. Off with 0.
    """
    import torch

    log_ratio = (logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    per_token = torch.maximum(unclipped, clipped)
    dual_clipped = torch.zeros_like(per_token, dtype=torch.bool)
    if clip_ratio_c > 0:
        cap = -advantages * clip_ratio_c
        dual_clipped = (advantages < 0) & (per_token > cap)
        per_token = torch.where(dual_clipped, cap, per_token)
    if weights is not None:
        per_token = per_token * weights
    loss = aggregate(per_token, mask, loss_agg, norm_tokens)
    with torch.no_grad():
        was_clipped = (clipped > unclipped).float()
        stats = {
            "clip_frac": masked_mean(was_clipped, mask),
            "dual_clip_frac": masked_mean(dual_clipped.float(), mask),
            "ratio_mean": masked_mean(ratio, mask),
            "approx_kl_old": masked_mean(0.5 * log_ratio**2, mask),
        }
    return loss, stats


IMPORTANCE_ESTIMATORS = ("behaviour", "decoupled", "tis", "mis")


def importance_weights(
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    estimator: str,
    cap: float = 2.0,
    floor: float = 0.0,
    level: str = "token",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token weights correcting for rollouts sampled by another policy than the learner's.

    ``behaviour_logprobs`` are what the rollout engine sampled with (with partial rollouts,
    each token under the policy version that produced it); ``proximal_logprobs`` are the
    learner's recompute under its current weights (the proximal policy of decoupled PPO,
    Hilton et al. 2021, as AReaL uses it). With ``w = π_prox / π_behav`` per token:

    * ``behaviour``: no correction (weights 1); the caller anchors the PPO ratio on the
      behaviour logprobs, so staleness is absorbed by the clip (and the dual clip).
    * ``decoupled``: the ratio is anchored on π_prox and each token's loss is weighted by
      ``w``; tokens with ``w > cap`` get weight 0 (AReaL's behaviour-weight cap; ``cap`` 0:
      no cap).
    * ``tis``: truncated importance sampling, ``min(w, cap)`` (Yao et al. 2025, the fix for
      a vLLM/FSDP mismatch; verl's truncate mode).
    * ``mis``: masked importance sampling, ``w`` where ``floor <= w <= cap``, else 0.

    ``level: sequence`` takes one ``w`` per episode, the geometric mean of its tokens' ratios
    (``exp(mean log w)``: a product of hundreds of ratios under- or overflows), and applies
    it to every token of the episode. Weights are detached (a correction, not a gradient
    path). Statistics, over generated tokens: raw ratio mean/max/min, the share of tokens
    whose weight was truncated or masked, and ``kl`` = mean(log π_behav − log π_prox), the
    k1 estimate of KL(behaviour ‖ learner) on the behaviour's own samples.
    """
    import torch

    if estimator not in IMPORTANCE_ESTIMATORS:
        raise ValueError(f"unknown importance estimator {estimator!r}: use one of "
                         f"{', '.join(IMPORTANCE_ESTIMATORS)}")
    with torch.no_grad():
        log_w = (proximal_logprobs - behaviour_logprobs) * mask
        if level == "sequence":
            per_episode = log_w.sum(-1) / mask.sum(-1).clamp(min=1)
            log_w = per_episode[:, None].expand_as(log_w) * mask
        elif level != "token":
            raise ValueError(f"unknown importance level {level!r}: use token or sequence")
        ratio = torch.exp(log_w.clamp(max=20.0))
        weights = torch.ones_like(ratio)
        cut = torch.zeros_like(ratio, dtype=torch.bool)
        if estimator == "decoupled":
            cut = ratio > cap if cap > 0 else cut
            weights = torch.where(cut, torch.zeros_like(ratio), ratio)
        elif estimator == "tis":
            cut = ratio > cap
            weights = torch.clamp(ratio, max=cap)
        elif estimator == "mis":
            cut = (ratio > cap) | (ratio < floor)
            weights = torch.where(cut, torch.zeros_like(ratio), ratio)
        weights = weights * mask
        active = mask > 0
        stats = {
            "ratio_mean": masked_mean(ratio, mask),
            "ratio_max": ratio[active].max() if active.any() else ratio.new_tensor(1.0),
            "ratio_min": ratio[active].min() if active.any() else ratio.new_tensor(1.0),
            "truncated_share": masked_mean(cut.float(), mask),
            "kl": masked_mean(behaviour_logprobs - proximal_logprobs, mask),
        }
    return weights, stats


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float,
    loss_agg: str = "token-mean",
    norm_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped value loss: 0.5 * max((V - R)², (clip(V, V_old ± c) - R)²)."""
    import torch

    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    per_token = 0.5 * torch.maximum((values - returns) ** 2, (clipped_values - returns) ** 2)
    loss = aggregate(per_token, mask, loss_agg, norm_tokens)
    with torch.no_grad():
        stats = {
            "vf_clip_frac": masked_mean(
                ((clipped_values - returns) ** 2 > (values - returns) ** 2).float(), mask
            ),
            "value_mean": masked_mean(values, mask),
        }
    return loss, stats


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(π || π_ref) from tokens sampled from π.

    k1 = log π - log π_ref: unbiased for the KL *value*, but as a loss its expected gradient
    is zero (E_π[∇ log π] = 0), so it only adds noise: a metric, never a loss (the config
    refuses it there). k2 = ½ (log π - log π_ref)²: biased value, but its gradient is the
    KL's gradient on-policy. k3 = exp(log π_ref - log π) - (log π_ref - log π) - 1:
    unbiased, always >= 0, low variance (verl's ``low_var_kl``).
    """
    import torch

    if estimator == "k1":
        return logprobs - ref_logprobs
    if estimator == "k2":
        return 0.5 * (logprobs - ref_logprobs) ** 2
    if estimator == "k3":
        log_ratio = torch.clamp(ref_logprobs - logprobs, -20.0, 20.0)
        return torch.exp(log_ratio) - log_ratio - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}: use k1, k2 or k3")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of the categorical distribution given by ``logits``."""
    import torch

    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)
