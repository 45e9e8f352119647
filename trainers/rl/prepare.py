"""The learner's no-gradient pass before an update: recompute, correct, advantages, mismatch.

One pass over the batch (eval mode, micro-batches) scores every token with the policy as it
is now (the *proximal* policy of decoupled PPO: the last weights before this update), the
critic's values, and the KL reference. Then:

* the off-policy correction (``algorithm.importance_correction``, the maths in
  ``algorithms.importance_weights``): which logprobs anchor the clipped ratio (the rollout
  engine's per token, or the recomputed proximal ones) and the per-token weights
  ``π_prox / π_rollout`` (truncated or masked);
* the mismatch the correction is for, per step: how far the rollout logprobs are from the
  learner's (``mismatch/*``: mean abs logprob difference, ratio mean/max/min, share of
  tokens truncated or masked, KL) and how stale the tokens are (``async/token_staleness_*``:
  learner version minus the version that sampled each token);
* advantages: GAE over the critic's values (PPO) or group-relative (GRPO/DAPO).

Plain tensor code over the learner's modules; no optimiser, no I/O.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from trainers.rl import algorithms as alg
from trainers.rl.batch import RLBatch

if TYPE_CHECKING:
    from trainers.rl.learner import Learner

__all__ = ["prepare_batch"]


def _recompute(learner: Learner, batch: RLBatch) -> dict[str, Any]:
    """Per-token proximal logprobs and entropy, values (PPO) and reference logprobs (KL)."""
    import torch

    config = learner.config
    learner_lp = torch.zeros_like(batch.mask)
    values = torch.zeros_like(batch.mask) if config.uses_critic else None
    ref_lp = torch.zeros_like(batch.mask) if config.uses_reference else None
    entropy = torch.zeros_like(batch.mask)
    t_policy = t_aux = 0.0
    start = 0
    with torch.no_grad(), learner._eval_mode(), learner._autocast():
        for micro in learner._micro_batches(batch):
            rows = slice(start, start + micro.size)
            start += micro.size
            micro = micro.to(learner.device)
            cols = micro.mask.shape[1]
            t0 = time.perf_counter()
            needed = learner.needed(micro)
            lp, ent, val = learner.module(micro.input_ids, micro.attention_mask, True, False,
                                          needed)
            t1 = time.perf_counter()
            t_policy += t1 - t0
            learner_lp[rows, :cols] = lp.float().cpu()
            entropy[rows, :cols] = ent.float().cpu()
            if learner.critic is not None:
                _, _, val = learner.critic(micro.input_ids, micro.attention_mask, False, False,
                                           needed)
            if values is not None:
                values[rows, :cols] = val.float().cpu()
            if ref_lp is not None:
                ref_lp[rows, :cols] = learner._reference_logprobs(micro).float().cpu()
            t_aux += time.perf_counter() - t1
    return {"learner_lp": learner_lp, "values": values, "ref_lp": ref_lp, "entropy": entropy,
            "t_policy": t_policy, "t_aux": t_aux}


def _correction(learner: Learner, batch: RLBatch, learner_lp: Any
                ) -> tuple[Any, Any, dict[str, float]]:
    """``(old_logprobs, weights or None, stats)``: the ratio's anchor and the importance
    weights of ``algorithm.importance_correction``, with the mismatch statistics."""
    import torch

    cfg = learner.config.algorithm
    mask = batch.mask
    has = batch.has_rollout_logprobs
    # Episodes without engine logprobs (text-only agents) use the learner's own.
    behaviour = torch.where(has[:, None], batch.old_logprobs, learner_lp) * mask
    rollout_mask = mask * has[:, None].float()
    weights, is_stats = alg.importance_weights(
        learner_lp, behaviour, rollout_mask, cfg.importance_correction, cfg.importance_cap,
        cfg.importance_floor, cfg.importance_level)
    stats: dict[str, float] = {}
    if has.any():
        diff = (learner_lp - batch.old_logprobs) * rollout_mask
        stats["mismatch/logprob_abs_diff"] = float(alg.masked_mean(diff.abs(), rollout_mask))
        stats["mismatch/kl_k3"] = float(alg.masked_mean(
            alg.kl_penalty(batch.old_logprobs, learner_lp, "k3") * rollout_mask, rollout_mask))
        stats.update({f"mismatch/{key}": float(value) for key, value in is_stats.items()})
    if batch.versions is not None:
        known = (batch.versions >= 0) & (mask > 0)
        if known.any():
            lag = (learner.updates - batch.versions[known]).float()
            stats["async/token_staleness_mean"] = float(lag.mean())
            stats["async/token_staleness_max"] = float(lag.max())
    if cfg.importance_correction == "behaviour":
        return behaviour, None, stats
    # tokens without rollout logprobs have nothing to correct: weight 1
    weights = torch.where(has[:, None], weights, torch.ones_like(weights)) * mask
    return learner_lp * mask, weights, stats


def prepare_batch(learner: Learner, batch: RLBatch) -> tuple[RLBatch, dict[str, float]]:
    """The batch with old logprobs, values, reference logprobs, importance weights and
    advantages filled in, and the statistics of this pass."""
    cfg = learner.config.algorithm
    mask = batch.mask
    length = mask.shape[1]
    out = _recompute(learner, batch)
    learner_lp, values, ref_lp = out["learner_lp"], out["values"], out["ref_lp"]
    old_lp, weights, stats = _correction(learner, batch, learner_lp)
    if values is not None:
        values = values * mask
        adv, returns = alg.gae_advantages(batch.token_rewards, values, mask, cfg.gamma, cfg.lam)
        if cfg.whiten_advantages:
            adv = alg.masked_whiten(adv, mask)
    else:
        per_episode = alg.group_advantages(batch.rewards, batch.group_ids, cfg.group_std_norm,
                                           episode_ids=batch.episode_ids)
        adv = per_episode[:, None].expand(-1, length) * mask
        returns = None
    stats.update({
        "adv/mean": float(alg.masked_mean(adv, mask)),
        "adv/std": float(alg.masked_mean((adv - alg.masked_mean(adv, mask)) ** 2, mask).sqrt()),
        "adv/max": float(adv[mask > 0].max()) if mask.any() else 0.0,
        "adv/min": float(adv[mask > 0].min()) if mask.any() else 0.0,
        "policy/entropy": float(alg.masked_mean(out["entropy"], mask)),
        "time/recompute_s": out["t_policy"],
        "time/ref_critic_s": out["t_aux"] if (values is not None or ref_lp is not None) else 0.0,
    })
    if values is not None:
        stats["critic/value_mean"] = float(alg.masked_mean(values, mask))
        stats["critic/return_mean"] = float(alg.masked_mean(returns, mask))
    if ref_lp is not None:
        stats["kl/ref"] = float(alg.masked_mean(
            alg.kl_penalty(learner_lp, ref_lp, cfg.kl_estimator), mask))
    prepared = RLBatch(**{**batch.__dict__, "old_logprobs": old_lp, "advantages": adv,
                          "returns": returns, "old_values": values, "ref_logprobs": ref_lp,
                          "is_weights": weights})
    return prepared, stats
