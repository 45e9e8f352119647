"""The learner's optimiser: AdamW on fp32 master weights, per-group clipping, loss scaling, LR schedule.

* Master weights stay fp32 whatever ``model.dtype`` says; the learner computes in bf16/fp16
  under ``torch.autocast``. Stepping bf16 weights directly rounds most updates away: a weight
  of 0.02 has a bf16 spacing of ~1e-4, ten times a typical 1e-5 step.
* fp16 gets dynamic loss scaling (``torch.amp.GradScaler``): small gradients underflow in
  fp16 otherwise. bf16 has fp32's exponent range and needs none.
* The actor (policy) and the critic (value head or separate critic) are clipped separately
  (``algorithm.max_grad_norm`` / ``critic_max_grad_norm``): a fresh, zero-initialised value
  head has large early gradients that would otherwise shrink every policy step with them.
* The learning rate follows ``algorithm.lr_schedule`` after ``lr_warmup_steps`` of linear
  warm-up, one value per RL step (:func:`lr_factor`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainers.rl.sections import AlgorithmSection

__all__ = ["LearnerOptimizer", "lr_factor"]


def lr_factor(update: int, total: int, warmup: int, schedule: str) -> float:
    """The multiple of ``lr`` that RL update ``update`` (0-based) of ``total`` uses.

    Warm-up rises linearly to 1 at update ``warmup - 1`` (its first update already moves:
    1/warmup, not transformers' 0); then ``constant`` stays at 1 while ``linear`` and
    ``cosine`` decay toward 0 over the remaining updates (the last one still moves).
    """
    import math

    if update < warmup:
        return (update + 1) / warmup
    progress = (update - warmup) / max(1, total - warmup)
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


def _number(norm: Any) -> float:
    """A clipped norm as a float; FSDP's is a DTensor (the global norm once reduced)."""
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


class LearnerOptimizer:
    """Everything that turns accumulated gradients into a weight update."""

    def __init__(self, algo: AlgorithmSection, actor: list[Any], critic: list[Any],
                 dtype: str, device_type: str) -> None:
        import torch

        self.algo = algo
        self.actor, self.critic = actor, critic
        groups = [{"params": actor, "lr": algo.lr}]
        if critic:
            groups.append({"params": critic, "lr": algo.critic_lr})
        self.optimizer = torch.optim.AdamW(groups, weight_decay=algo.weight_decay)
        self.scaler = torch.amp.GradScaler(device_type, enabled=dtype == "float16")
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda update: lr_factor(update, algo.total_steps,
                                                     algo.lr_warmup_steps, algo.lr_schedule))

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: Any) -> None:
        self.scaler.scale(loss).backward()

    def step(self) -> dict[str, float]:
        """Unscale, clip actor and critic separately, step (skipped by the scaler on inf)."""
        import torch

        self.scaler.unscale_(self.optimizer)
        stats = {"policy/grad_norm": _number(torch.nn.utils.clip_grad_norm_(
            self.actor, self.algo.max_grad_norm))}
        if self.critic:
            stats["critic/grad_norm"] = _number(torch.nn.utils.clip_grad_norm_(
                self.critic, self.algo.critic_max_grad_norm))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scaler.is_enabled():
            stats["policy/loss_scale"] = float(self.scaler.get_scale())
        return stats

    def end_update(self) -> float:
        """Advance the LR schedule by one RL step; returns the policy LR that step used."""
        used = float(self.optimizer.param_groups[0]["lr"])
        self.scheduler.step()
        return used

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict(),
                "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.scheduler.load_state_dict(state["scheduler"])
