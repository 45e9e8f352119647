"""Random-token RL batches shaped like agent episodes, for tests and benchmarks of the learner.

An episode is a prompt then ``turns`` x (generated tokens with their engine log-probs, an
observation); episodes are grouped ``group`` at a time. Every length may depend on the episode
(and turn), so a batch has the ragged rows real episodes have. The tokens are drawn from one
seeded generator in a fixed order (prompt, then per turn: generated ids, their log-probs unless
``logprob`` fixes them, the observation), so a seed gives the same batch everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["random_batch"]


def _length(spec: int | Callable[..., int], *where: int) -> int:
    return spec(*where) if callable(spec) else spec


def random_batch(vocab: int, episodes: int, *, seed: int = 0, group: int = 4, turns: int = 2,
                 prompt_len: int | Callable[[int], int] = 5,
                 generated_len: int | Callable[[int, int], int] = 4,
                 observation_len: int = 4,
                 reward: Callable[[int], float] = lambda i: float(i % 2),
                 logprob: float | None = None, env_id: str = "t",
                 group_prompt: bool = False) -> Any:
    """A collated :class:`~trainers.rl.batch.RLBatch` of ``episodes`` random episodes.

    ``prompt_len(i)``, ``generated_len(i, turn)`` and ``reward(i)`` give episode ``i``'s
    shape and reward (an int is a fixed length); log-probs are uniform in (-3, 0] unless
    ``logprob`` sets them all. ``group_prompt``: a group's episodes share their first
    episode's prompt, as the episodes of one task do.
    """
    import torch

    from agents.trajectory import Trajectory
    from trainers.rl.batch import collate

    gen = torch.Generator().manual_seed(seed)

    def tokens(count: int) -> list[int]:
        return torch.randint(0, vocab, (count,), generator=gen).tolist()

    trajectories = []
    for i in range(episodes):
        shared = group_prompt and i % group
        prompt = list(trajectories[i - i % group].prompt_ids) if shared else \
            tokens(_length(prompt_len, i))
        t = Trajectory(env_id=env_id, task_id=str(i), reward=reward(i), prompt_ids=prompt)
        for turn in range(turns):
            ids = tokens(_length(generated_len, i, turn))
            logprobs = [logprob] * len(ids) if logprob is not None else \
                (-torch.rand(len(ids), generator=gen) * 3).tolist()
            t.add_generated("x", ids, logprobs)
            t.add_observation("o", tokens(observation_len))
        trajectories.append(t)
    return collate(trajectories, [t.reward for t in trajectories], [i // group for i in range(episodes)])
