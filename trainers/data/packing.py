"""Pack tokenised samples into fixed-budget rows with correct attention boundaries.

A *pack* is one row of at most ``pack_len`` tokens holding whole samples back to back. Each
sample keeps its own position ids (restarting at 0) and its length is recorded, so attention
can be restricted to the sample (varlen attention over ``cu_seq_lens``, or a block-diagonal
causal mask) and no token ever attends across a sample boundary.

Targets are shifted here, per sample: ``targets[t]`` is the label of token ``t + 1`` of the
same sample and -100 at each sample's last token, so a loss computed over a pack never asks
one sample's last token to predict the next sample's first.

Samples longer than ``max_seq_len`` follow the truncation policy, and every cut is counted in
a :class:`TruncationReport` so a user can see how much data a setting throws away.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trainers.data.tokenize import IGNORE_INDEX, TokenizedSample

__all__ = ["Pack", "TruncationPolicy", "TruncationReport", "pack_samples", "pack_to_batch",
           "truncate_samples"]


class TruncationPolicy(StrEnum):
    """What to do with a sample longer than ``max_seq_len``."""

    DROP = "drop"  # leave it out
    TRUNCATE_RIGHT = "truncate_right"  # keep the first max_seq_len tokens
    ERROR = "error"  # refuse to train


@dataclass(frozen=True, slots=True)
class TruncationReport:
    """How many samples and tokens the length limit cost."""

    samples_in: int
    samples_kept: int
    truncated: int
    dropped_too_long: int
    dropped_untrainable: int
    tokens_cut: int
    trained_tokens_cut: int

    def summary(self) -> str:
        return (f"{self.samples_kept}/{self.samples_in} samples kept; {self.truncated} truncated, "
                f"{self.dropped_too_long} dropped as too long, {self.dropped_untrainable} dropped "
                f"with no trained token; {self.tokens_cut} tokens cut "
                f"({self.trained_tokens_cut} of them trained)")


@dataclass(frozen=True, slots=True)
class Pack:
    """Whole samples concatenated; ``targets`` are the per-sample shifted labels."""

    input_ids: tuple[int, ...]
    targets: tuple[int, ...]
    seq_lens: tuple[int, ...]
    sample_ids: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_trained(self) -> int:
        return sum(1 for t in self.targets if t != IGNORE_INDEX)

    def position_ids(self) -> list[int]:
        return [p for n in self.seq_lens for p in range(n)]


class SampleTooLongError(ValueError):
    """Raised under ``TruncationPolicy.ERROR``."""


def truncate_samples(
    samples: list[TokenizedSample], max_seq_len: int, policy: TruncationPolicy | str
) -> tuple[list[TokenizedSample], TruncationReport]:
    """Apply the length policy; drop samples left with nothing to train on."""
    policy = TruncationPolicy(policy)
    kept: list[TokenizedSample] = []
    truncated = dropped_long = dropped_empty = cut = cut_trained = 0
    for sample in samples:
        if len(sample) > max_seq_len:
            if policy is TruncationPolicy.ERROR:
                raise SampleTooLongError(
                    f"sample {sample.sample_id} has {len(sample)} tokens > max_seq_len "
                    f"{max_seq_len}; raise max_seq_len or pick truncation=drop|truncate_right")
            cut += len(sample) - (max_seq_len if policy is TruncationPolicy.TRUNCATE_RIGHT else 0)
            lost = sample.labels[max_seq_len:] if policy is TruncationPolicy.TRUNCATE_RIGHT \
                else sample.labels
            cut_trained += sum(1 for label in lost if label != IGNORE_INDEX)
            if policy is TruncationPolicy.DROP:
                dropped_long += 1
                continue
            truncated += 1
            sample = TokenizedSample(sample.sample_id, sample.input_ids[:max_seq_len],
                                     sample.labels[:max_seq_len])
        # The first token is never predicted, so a sample whose only trained token is the
        # first one still has nothing to learn from.
        if not any(label != IGNORE_INDEX for label in sample.labels[1:]):
            dropped_empty += 1
            continue
        kept.append(sample)
    report = TruncationReport(len(samples), len(kept), truncated, dropped_long, dropped_empty,
                              cut, cut_trained)
    return kept, report


def _shifted(sample: TokenizedSample) -> list[int]:
    return [*sample.labels[1:], IGNORE_INDEX]


def _make_pack(members: list[TokenizedSample]) -> Pack:
    return Pack(
        input_ids=tuple(t for s in members for t in s.input_ids),
        targets=tuple(t for s in members for t in _shifted(s)),
        seq_lens=tuple(len(s) for s in members),
        sample_ids=tuple(s.sample_id for s in members),
    )


def pack_samples(samples: list[TokenizedSample], pack_len: int | None) -> list[Pack]:
    """First-fit-decreasing bin packing into rows of at most ``pack_len`` tokens.

    ``pack_len=None`` disables packing (one sample per row). Deterministic: ties keep input
    order. Every sample must already fit (see :func:`truncate_samples`).
    """
    if pack_len is None:
        return [_make_pack([s]) for s in samples]
    too_long = [s.sample_id for s in samples if len(s) > pack_len]
    if too_long:
        raise ValueError(f"{len(too_long)} samples exceed pack_len={pack_len}; truncate first")
    order = sorted(range(len(samples)), key=lambda i: (-len(samples[i]), i))
    bins: list[list[int]] = []
    # free[i] is the remaining room of bins[i]; keep a sorted index of (room, bin) to find
    # the first bin with enough room in O(log n).
    room_index: list[tuple[int, int]] = []
    for i in order:
        need = len(samples[i])
        at = bisect.bisect_left(room_index, (need, -1))
        if at == len(room_index):
            bins.append([i])
            bisect.insort(room_index, (pack_len - need, len(bins) - 1))
            continue
        room, b = room_index.pop(at)
        bins[b].append(i)
        bisect.insort(room_index, (room - need, b))
    return [_make_pack([samples[i] for i in members]) for members in bins]


def pack_to_batch(pack: Pack, device: Any = "cpu") -> dict[str, Any]:
    """Tensors for one micro-batch row: ids, targets, position ids and varlen boundaries.

    The keys ``cu_seq_lens_q/k`` and ``max_length_q/k`` are the names transformers passes to
    flash-attention varlen kernels, so the same batch also drives ``flash_attention_2``.
    """
    import torch

    cu = [0]
    for n in pack.seq_lens:
        cu.append(cu[-1] + n)
    cu_tensor = torch.tensor(cu, dtype=torch.int32, device=device)
    return {
        "input_ids": torch.tensor([pack.input_ids], dtype=torch.long, device=device),
        "targets": torch.tensor([pack.targets], dtype=torch.long, device=device),
        "position_ids": torch.tensor([pack.position_ids()], dtype=torch.long, device=device),
        "cu_seq_lens_q": cu_tensor,
        "cu_seq_lens_k": cu_tensor,
        "max_length_q": max(pack.seq_lens),
        "max_length_k": max(pack.seq_lens),
    }
