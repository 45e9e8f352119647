"""From preference pairs to packed rows: tokenise each side span by span, apply the length
policy pairwise, pack whole pairs into rows.

Each side of a pair becomes an :class:`~trainers.data.SftSample` through the same path SFT
data takes (:func:`~trainers.data.sample_from_trajectory` + :func:`~trainers.data.tokenize_sample`):
recorded token ids are used as sampled; text is tokenised piece by piece, so a label (and so
a log-prob term) exists exactly for generated tokens and never for prompt or observation
tokens. A row holds whole pairs (both sides, each attending only to itself), packed
first-fit-decreasing by :func:`~trainers.data.pack_samples`, so the trainer can score both
sides of every pair in one forward.

No torch at import time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from agents.trajectory import Segment, Trajectory
from coa_envs.errors import UserError
from trainers.data import (
    Pack,
    SftSample,
    TokenizedSample,
    TruncationReport,
    pack_samples,
    sample_from_trajectory,
    tokenize_sample,
    truncate_samples,
)
from trainers.dpo.pairs import PreferencePair

__all__ = ["PairDataError", "PairRow", "PreparedPairs", "pair_samples", "prepare_pair_rows"]

_SIDES = ("chosen", "rejected")


class PairDataError(UserError, ValueError):
    """Pairs the trainer cannot score as configured; the message says what to change."""


@dataclass(frozen=True, slots=True)
class PairRow:
    """One packed row: whole pairs, and where each pair's two samples sit in the pack."""

    pack: Pack
    pair_ids: tuple[str, ...]
    chosen_at: tuple[int, ...]
    rejected_at: tuple[int, ...]

    @property
    def num_pairs(self) -> int:
        return len(self.pair_ids)


@dataclass(frozen=True, slots=True)
class PreparedPairs:
    """Rows ready for the loop, and what tokenisation and the length policy left out."""

    rows: tuple[PairRow, ...]
    report: TruncationReport
    pairs_in: int

    @property
    def pairs_kept(self) -> int:
        return sum(row.num_pairs for row in self.rows)

    @property
    def num_tokens(self) -> int:
        return sum(len(row.pack) for row in self.rows)

    def summary(self) -> str:
        return (f"{self.pairs_kept}/{self.pairs_in} pairs kept; sides: {self.report.summary()} "
                "(a pair is dropped when either side is)")


def _sample_id(pair_id: str, side: str) -> str:
    return f"{pair_id}\t{side}"


def _text_only(trajectory: Trajectory) -> Trajectory:
    return dataclasses.replace(trajectory, prompt_ids=[],
                               segments=[Segment(s.kind, s.text) for s in trajectory.segments])


def pair_samples(pair: PreferencePair, text_only: bool = False) -> tuple[SftSample, SftSample]:
    """The two sides as SFT samples; ``text_only`` drops recorded token ids (a fresh tiny
    tokenizer cannot read ids another model's tokenizer produced)."""
    sides = []
    for side in _SIDES:
        trajectory: Trajectory = getattr(pair, side)
        if text_only:
            trajectory = _text_only(trajectory)
        sides.append(sample_from_trajectory(trajectory, _sample_id(pair.pair_id, side)))
    return sides[0], sides[1]


def _tokenize(sample: SftSample, pair: PreferencePair, side: str, tokenizer: Any,
              tokenizer_note: str) -> TokenizedSample:
    if not sample.has_token_ids and tokenizer is None:
        raise PairDataError(
            f"pair {pair.pair_id!r}: the {side} trajectory has no token ids and there is no "
            f"tokenizer to tokenise its text ({tokenizer_note}). Set model.tokenizer to the "
            "tokenizer of the model that sampled the run, or build the pairs from a run that "
            "recorded token ids (coa eval --engine hf or vllm)")
    return tokenize_sample(sample, tokenizer)


def prepare_pair_rows(pairs: list[PreferencePair], tokenizer: Any, *, max_seq_len: int,
                      truncation: str, pack_len: int, packing: bool, text_only: bool = False,
                      tokenizer_note: str = "") -> PreparedPairs:
    """Tokenise both sides of every pair, apply the length policy, pack whole pairs."""
    tokenized: list[TokenizedSample] = []
    for pair in pairs:
        chosen, rejected = pair_samples(pair, text_only)
        tokenized.append(_tokenize(chosen, pair, "chosen", tokenizer, tokenizer_note))
        tokenized.append(_tokenize(rejected, pair, "rejected", tokenizer, tokenizer_note))
    kept, report = truncate_samples(tokenized, max_seq_len, truncation)
    by_id = {sample.sample_id: sample for sample in kept}
    whole: list[tuple[str, TokenizedSample, TokenizedSample]] = []
    for pair in pairs:
        chosen = by_id.get(_sample_id(pair.pair_id, "chosen"))
        rejected = by_id.get(_sample_id(pair.pair_id, "rejected"))
        if chosen is not None and rejected is not None:
            whole.append((pair.pair_id, chosen, rejected))
    if packing:
        # First-fit-decreasing over whole pairs: pack one stand-in sample per pair (its
        # length is the pair's), then lay each bin's pairs out side by side in one row.
        stand_ins = [TokenizedSample(pid, c.input_ids + r.input_ids, c.labels + r.labels)
                     for pid, c, r in whole]
        groups = [pack.sample_ids for pack in pack_samples(stand_ins, pack_len)]
    else:
        groups = [(pid,) for pid, _, _ in whole]
    members = {pid: (c, r) for pid, c, r in whole}
    rows = [_row(group, members, pack_len) for group in groups]
    return PreparedPairs(tuple(rows), report, len(pairs))


def _row(pair_ids: tuple[str, ...], members: dict[str, tuple[TokenizedSample, TokenizedSample]],
         pack_len: int) -> PairRow:
    samples = [sample for pid in pair_ids for sample in members[pid]]
    packs = pack_samples(samples, pack_len)
    if len(packs) != 1:  # the bin was sized to fit; anything else is a bug, not bad input
        raise AssertionError(f"pairs {pair_ids} did not fit one row of {pack_len} tokens")
    pack = packs[0]
    where = {sample_id: i for i, sample_id in enumerate(pack.sample_ids)}
    return PairRow(pack, pair_ids,
                   tuple(where[_sample_id(pid, "chosen")] for pid in pair_ids),
                   tuple(where[_sample_id(pid, "rejected")] for pid in pair_ids))
