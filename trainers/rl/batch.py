"""Turn token-exact ``Trajectory`` records into padded, target-aligned training tensors.

The rollout engine's token ids are used as they are (never re-tokenised): the sequence
is ``prompt_ids + response_ids`` and the mask is ``Trajectory.full_loss_mask()``. Tensors
are *target-aligned* (length ``L - 1``): position ``t`` holds the token at ``t + 1`` of
the input, its mask bit, the engine's sampled logprob for it (recorded per token, so a turn
that resumed under new weights keeps each token's own), its policy version, and so on, which is how a
causal LM's logits line up. Rewards sit on the last generated token of each episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from agents.trajectory import Trajectory

__all__ = ["RLBatch", "collate"]


@dataclass
class RLBatch:
    """A batch of episodes as tensors; optional fields are filled by the learner."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    mask: torch.Tensor  # [B, L-1] 1 on generated target tokens
    old_logprobs: torch.Tensor  # [B, L-1] behaviour (rollout engine) logprobs
    has_rollout_logprobs: torch.Tensor  # [B] bool: engine returned logprobs for every token
    rewards: torch.Tensor  # [B] shaped episode rewards
    token_rewards: torch.Tensor  # [B, L-1] reward on the last generated token
    group_ids: torch.Tensor  # [B]
    episode_ids: torch.Tensor | None = None  # [B] rows that are segments of one episode share an id
    versions: torch.Tensor | None = None  # [B, L-1] policy version of each generated token, else -1
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None  # [B, L-1] off-policy correction weights (learner)

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, index: Any) -> RLBatch:
        """Rows ``index`` of every tensor, trimmed to the longest selected sequence."""
        rows = {}
        for f in fields(self):
            value = getattr(self, f.name)
            rows[f.name] = None if value is None else value[index]
        picked = RLBatch(**rows)
        length = int(picked.attention_mask.sum(-1).max().item()) if picked.size else 1
        return picked.trim(max(length, 2))

    def trim(self, length: int) -> RLBatch:
        updates = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value.dim() < 2:
                continue
            cut = length if f.name in ("input_ids", "attention_mask") else length - 1
            updates[f.name] = value[:, :cut]
        return replace(self, **updates)

    def to(self, device: Any) -> RLBatch:
        return replace(
            self,
            **{
                f.name: getattr(self, f.name).to(device)
                for f in fields(self)
                if getattr(self, f.name) is not None
            },
        )


def collate(
    trajectories: Sequence[Trajectory],
    rewards: Sequence[float],
    group_ids: Sequence[int],
    pad_token_id: int = 0,
    episode_ids: Sequence[int] | None = None,
) -> RLBatch:
    """Pad episodes to one length; everything after the prompt keeps its engine token ids.

    ``episode_ids`` marks rows that are token-exact segments of one episode (a gateway
    session split where its prompts stopped extending each other): the group advantage
    counts each episode once (:func:`trainers.rl.algorithms.group_advantages`)."""
    import torch

    if not trajectories:
        raise ValueError("cannot collate an empty batch")
    inputs = [t.input_ids() for t in trajectories]
    length = max(2, max(len(ids) for ids in inputs))
    batch = len(trajectories)
    input_ids = torch.full((batch, length), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, length), dtype=torch.long)
    mask = torch.zeros((batch, length - 1), dtype=torch.float32)
    old_logprobs = torch.zeros((batch, length - 1), dtype=torch.float32)
    token_rewards = torch.zeros((batch, length - 1), dtype=torch.float32)
    versions = torch.full((batch, length - 1), -1, dtype=torch.long)
    has_logprobs = torch.zeros(batch, dtype=torch.bool)
    for row, (traj, ids) in enumerate(zip(trajectories, inputs, strict=True)):
        n = len(ids)
        input_ids[row, :n] = torch.tensor(ids, dtype=torch.long)
        attention[row, :n] = 1
        full_mask = traj.full_loss_mask()
        logprobs = [0.0] * len(traj.prompt_ids) + traj.sampled_logprobs()
        mask[row, : n - 1] = torch.tensor(full_mask[1:], dtype=torch.float32)
        old_logprobs[row, : n - 1] = torch.tensor(logprobs[1:], dtype=torch.float32)
        token_versions = [-1] * len(traj.prompt_ids) + traj.sampled_versions()
        versions[row, : n - 1] = torch.tensor(token_versions[1:], dtype=torch.long)
        has_logprobs[row] = all(
            len(s.logprobs) == len(s.token_ids) for s in traj.segments if s.kind == "generated"
        )
        generated = mask[row].nonzero()
        if len(generated):
            token_rewards[row, int(generated[-1])] = float(rewards[row])
    return RLBatch(
        input_ids=input_ids,
        attention_mask=attention,
        mask=mask,
        old_logprobs=old_logprobs,
        has_rollout_logprobs=has_logprobs,
        rewards=torch.tensor([float(r) for r in rewards], dtype=torch.float32),
        token_rewards=token_rewards,
        group_ids=torch.tensor(list(group_ids), dtype=torch.long),
        episode_ids=None if episode_ids is None else torch.tensor(list(episode_ids), dtype=torch.long),
        versions=versions,
    )
