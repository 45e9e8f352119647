"""From files to packed rows: load, split off eval, tokenise, apply the length policy, pack.

Also owns the data *order*: each epoch's row order is a pure function of (seed, epoch), so a
resumed run walks the same rows in the same order without saving any sampler state.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from trainers.data.formats import SftSample
from trainers.data.packing import Pack, TruncationReport, pack_samples, truncate_samples
from trainers.data.tokenize import tokenize_sample

__all__ = ["PreparedData", "epoch_order", "prepare_packs", "split_eval"]


@dataclass(frozen=True, slots=True)
class PreparedData:
    """Packed rows ready for the loop, and what the length limit cost."""

    packs: tuple[Pack, ...]
    report: TruncationReport

    @property
    def num_tokens(self) -> int:
        return sum(len(p) for p in self.packs)

    @property
    def num_trained(self) -> int:
        return sum(p.num_trained for p in self.packs)


def split_eval(samples: list[SftSample], fraction: float,
               seed: int) -> tuple[list[SftSample], list[SftSample]]:
    """Hold out ``fraction`` of the samples, chosen by a seeded shuffle (deterministic)."""
    if fraction <= 0:
        return samples, []
    order = list(range(len(samples)))
    random.Random(seed).shuffle(order)
    n_eval = max(1, round(len(samples) * fraction))
    held = set(order[:n_eval])
    train = [s for i, s in enumerate(samples) if i not in held]
    return train, [s for i, s in enumerate(samples) if i in held]


def prepare_packs(samples: list[SftSample], tokenizer: Any, *, max_seq_len: int,
                  truncation: str, pack_len: int | None) -> PreparedData:
    """Tokenise span by span, apply the truncation policy, then pack."""
    tokenized = [tokenize_sample(sample, tokenizer) for sample in samples]
    kept, report = truncate_samples(tokenized, max_seq_len, truncation)
    return PreparedData(tuple(pack_samples(kept, pack_len)), report)


def epoch_order(num_packs: int, seed: int, epoch: int) -> list[int]:
    """The row order of one epoch; independent of any global RNG state."""
    order = list(range(num_packs))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order
