"""The preference losses, as pure tensor functions (the maths of ``trainers/dpo``).

For a pair, let ``pi_c, pi_r`` be the policy's log-likelihood of the chosen and rejected
response (summed over *generated* tokens only; prompt and observation tokens carry no
target) and ``ref_c, ref_r`` the same under the frozen reference. With
``h = (pi_c - ref_c) - (pi_r - ref_r)``:

* ``sigmoid`` (DPO, Rafailov et al. 2023): ``-log sigmoid(beta * h)``. With label smoothing
  ``eps`` (conservative DPO: each label is wrong with probability eps) the loss is
  ``-(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)``, which stops pushing the
  margin once ``beta h`` reaches ``log((1 - eps) / eps)`` instead of growing it forever.
* ``ipo`` (Azar et al. 2023): ``(h - 1 / (2 beta))^2`` on *per-token mean* log-probs, a
  squared loss that regresses the margin to a fixed target instead of saturating, so it
  does not overfit deterministic preferences.

The implicit rewards ``beta * (pi - ref)`` of each side are what the trainer logs
(``rewards/chosen``, ``rewards/rejected``, their margin and how often chosen wins). At the
first step the policy is the reference, so ``h = 0`` and the sigmoid loss is ``log 2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PreferenceOutput", "preference_loss", "segment_sums"]


@dataclass(frozen=True, slots=True)
class PreferenceOutput:
    """Per-pair tensors: the loss (with grad) and the implicit rewards (detached)."""

    losses: Any
    chosen_rewards: Any
    rejected_rewards: Any


def preference_loss(policy_chosen: Any, policy_rejected: Any, ref_chosen: Any,
                    ref_rejected: Any, *, beta: float, loss_type: str = "sigmoid",
                    label_smoothing: float = 0.0) -> PreferenceOutput:
    """Per-pair losses from sequence log-probs (each a ``[N]`` tensor); see the module doc.

    For ``ipo`` the inputs must already be per-token means (the trainer divides each side's
    sum by its number of generated tokens).
    """
    import torch.nn.functional as F

    margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    if loss_type == "sigmoid":
        losses = (-(1.0 - label_smoothing) * F.logsigmoid(beta * margin)
                  - label_smoothing * F.logsigmoid(-beta * margin))
    elif loss_type == "ipo":
        losses = (margin - 1.0 / (2.0 * beta)) ** 2
    else:
        raise ValueError(f"loss_type={loss_type!r}: choose sigmoid or ipo")
    return PreferenceOutput(losses, (beta * (policy_chosen - ref_chosen)).detach(),
                            (beta * (policy_rejected - ref_rejected)).detach())


def segment_sums(values: Any, lengths: list[int] | tuple[int, ...]) -> Any:
    """Sum of ``values`` ([T]) over consecutive segments of ``lengths`` -> ``[len(lengths)]``.

    One packed row holds several samples back to back; this is each sample's total.
    """
    import torch

    index = torch.repeat_interleave(torch.arange(len(lengths), device=values.device),
                                    torch.tensor(lengths, device=values.device))
    return values.new_zeros(len(lengths)).index_add(0, index, values)
