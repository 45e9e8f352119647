"""Where the SFT trainer's data comes from: one ``train_path``, or a mixture of envs.

A *source* is one body of training samples with its held-out samples: the single
``data.train_path`` (with ``eval_path`` or an ``eval_fraction`` split), or one entry of
``data.envs`` (its ``path`` and ``eval_path``, made from the env by the oracle when missing
and ``data.generate`` is set: training tasks for ``path``, held-out tasks for ``eval_path``).

With a mixture, :class:`MixedRows` decides which packed rows an optimiser step trains on:
each of the step's ``grad_accum`` rows comes from a source drawn by weight
(:func:`trainers.common.mixture.choose`, a pure function of seed, step and slot), and each
source walks its own rows in a seeded per-epoch order with its own cursor. The cursors are
the only state; they go into the checkpoint, so a resumed run continues the same draws.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.common.mixture import choose
from trainers.data import SftSample, epoch_order, load_samples, split_eval

if TYPE_CHECKING:
    from trainers.sft.config import SFTConfig, SFTMixtureEntry

__all__ = ["MixedRows", "Source", "load_sources"]


@dataclass
class Source:
    """Samples of one source; ``name`` is "" for a single ``train_path`` (no per-env keys)."""

    name: str
    train: list[SftSample]
    eval: list[SftSample] = field(default_factory=list)


def _generate(env_id: str, path: Path, episodes: int, generate: dict[str, Any],
              env_kwargs: dict[str, Any], split: str) -> None:
    from trainers.common import deep_merge
    from trainers.data.generate import generate_trajectories

    options = deep_merge(dict(generate), deep_merge(env_kwargs, {"task_options": {"split": split}}))
    options.pop("n", None)
    generate_trajectories(env_id, path, episodes, **options)


def _entry_source(config: SFTConfig, entry: SFTMixtureEntry, main: bool,
                  barrier: Callable[[], None]) -> Source:
    spec = config.data
    generate = dict(spec.generate or {})
    episodes = int(generate.get("n", 300))
    wanted = [(Path(entry.path), "train", episodes)]
    if entry.eval_path:  # the held-out side of an 80/20 split: a fifth as many episodes
        wanted.append((Path(entry.eval_path), "test", max(1, episodes // 5)))
    for path, split, count in wanted:
        if path.exists():
            continue
        if not generate:
            raise FileNotFoundError(f"data.envs entry {entry.name}: {path} does not exist (set "
                                    "data.generate to make it from the env with the oracle)")
        if main:
            _generate(entry.id, path, count, generate, entry.env_kwargs, split)
        barrier()
    train = _filtered(load_samples(entry.path, spec.format), spec.min_reward)
    if entry.eval_path:
        return Source(entry.name, train, load_samples(entry.eval_path, spec.format))
    train, held = split_eval(train, spec.eval_fraction, config.bookkeeping.seed)
    return Source(entry.name, train, held)


def _filtered(samples: list[SftSample], min_reward: float | None) -> list[SftSample]:
    if min_reward is None:
        return samples
    return [s for s in samples if s.meta.get("reward", 1.0) >= min_reward]


def load_sources(config: SFTConfig, main: bool, barrier: Callable[[], None]) -> list[Source]:
    """Read (and on the main process, make) every source's samples."""
    spec = config.data
    if spec.envs:
        return [_entry_source(config, entry, main, barrier) for entry in spec.envs]
    train_path = Path(spec.train_path)
    if not train_path.exists():
        if not spec.generate:
            raise FileNotFoundError(f"train_path {train_path} does not exist (set `generate` "
                                    "to make it from an env, e.g. the oracle on SynthHop)")
        if main:
            from trainers.data.generate import generate_trajectories

            generate = dict(spec.generate)
            generate_trajectories(generate.pop("env_id"), train_path,
                                  int(generate.pop("n", 300)), **generate)
        barrier()
    samples = _filtered(load_samples(train_path, spec.format), spec.min_reward)
    if spec.eval_path:
        return [Source("", samples, load_samples(spec.eval_path, spec.format))]
    train, held = split_eval(samples, spec.eval_fraction, config.bookkeeping.seed)
    return [Source("", train, held)]


class MixedRows:
    """Which packed rows each step trains on when sources are mixed by weight.

    ``offsets[i]`` is where source ``i``'s rows start in the trainer's combined row list;
    ``counts[i]`` how many it has. This rank walks every ``world``-th row of each source.
    """

    def __init__(self, entries: list[SFTMixtureEntry], offsets: list[int], counts: list[int],
                 seed: int, rank: int = 0, world: int = 1,
                 cursors: dict[str, list[int]] | None = None) -> None:
        self.entries, self.offsets, self.counts = entries, offsets, counts
        self.seed, self.rank, self.world = seed, rank, world
        for entry, count in zip(entries, counts, strict=True):
            if count // world == 0 and entry.weight > 0:
                raise ValueError(f"data.envs entry {entry.name}: {count} packed rows cannot "
                                 f"feed {world} processes")
        self.cursors = {e.name: list((cursors or {}).get(e.name, [0, 0])) for e in entries}
        self._orders: dict[tuple[int, int], list[int]] = {}

    def _order(self, index: int, epoch: int) -> list[int]:
        if (index, epoch) not in self._orders:
            self._orders = {key: v for key, v in self._orders.items() if key[0] != index}
            self._orders[(index, epoch)] = self._shuffled(index, epoch)
        return self._orders[(index, epoch)]

    def _shuffled(self, index: int, epoch: int) -> list[int]:
        name = self.entries[index].name
        source_seed = zlib.crc32(f"{self.seed}:{name}".encode())
        per_rank = self.counts[index] // self.world
        return epoch_order(self.counts[index], source_seed, epoch)[self.rank::self.world][:per_rank]

    def take(self, step: int, count: int) -> list[tuple[int, int]]:
        """``(source, combined row index)`` for the ``count`` rows of ``step`` (1-based)."""
        picked = []
        for slot in range(count):
            index = choose(self.entries, self.seed, step, slot)
            cursor = self.cursors[self.entries[index].name]
            order = self._order(index, cursor[0])
            if cursor[1] >= len(order):
                cursor[0], cursor[1] = cursor[0] + 1, 0
                order = self._order(index, cursor[0])
            picked.append((index, self.offsets[index] + order[cursor[1]]))
            cursor[1] += 1
        return picked

    def state(self) -> dict[str, list[int]]:
        """``{name: [epoch, rows taken in it]}`` per source (for the checkpoint)."""
        return {name: list(cursor) for name, cursor in self.cursors.items()}
