"""Training on several envs at once: the ``envs`` list of a config, and the weighted draw.

A mixture is a list of entries ``{id, weight, env_kwargs, name}``; the RL trainer draws each
prompt group's env by weight, the SFT trainer each packed row's. Every entry gets a short
``name`` (the id without ``coa/``: ``SynthHop-v1``) that keys its metrics
(``rollout/SynthHop-v1/reward_mean``, ``eval/SynthHop-v1/heldout_reward_mean``).

The draw is a pure function of ``(seed, step, slot)`` (:func:`choose`), not a stream: a run
is reproducible, and a resumed run draws what the uninterrupted one would have without any
sampler state in the checkpoint. Each env's own task (or row) order is the caller's, with
its own cursor.

Validation fails with one :class:`ConfigError`: an id no registry knows (with the closest
registered ids), a weight that is not a number >= 0, weights summing to 0, two entries with
one name. Stdlib + PyYAML (and gymnasium's registry, only when ids are checked).
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainers.common.config import ConfigError, build_section, check_fields

__all__ = ["MixtureEntry", "check_env_ids", "choose", "mixture_entries", "normalised_weights"]


@dataclass
class MixtureEntry:
    """One env of a mixture."""

    id: str
    """A registered env id (``coa list``)."""
    weight: float = 1.0
    """Relative share of draws (>= 0; the weights of a mixture must sum to more than 0)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make`` for this env (task_options, data_path, ...)."""
    name: str = ""
    """Key of this env's metrics; default: the id without ``coa/``."""

    def __post_init__(self) -> None:
        check_fields(self, f"envs[{self.name or self.id}].")
        if not self.id:
            raise ConfigError("an envs entry needs an id, e.g. {id: coa/SynthHop-v1, weight: 1}")
        if self.weight < 0 or self.weight != self.weight:
            raise ConfigError(f"envs entry {self.id}: weight={self.weight} must be a number >= 0")
        if not self.name:
            self.name = self.id.removeprefix("coa/")


def mixture_entries(raw: Sequence[Any], where: str, entry_cls: type[MixtureEntry] = MixtureEntry
                    ) -> list[MixtureEntry]:
    """Build and check a mixture from a config's list (``where`` names it in messages)."""
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise ConfigError(f"{where} must be a list of {{id, weight, env_kwargs}} entries, "
                          f"not {raw!r}")
    entries = []
    for index, item in enumerate(raw):
        if isinstance(item, entry_cls):
            entries.append(item)
            continue
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}[{index}] must be a mapping like {{id: coa/SynthHop-v1, "
                              f"weight: 0.5}}, not {item!r}")
        entries.append(build_section(entry_cls, item, prefix=f"{where}[{index}]."))
    if not entries:
        raise ConfigError(f"{where} is empty: name at least one env")
    names = [e.name for e in entries]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"{where}: two entries are named {repeated[0]!r}; give each a distinct "
                          "`name` (it keys the per-env metrics)")
    total = sum(e.weight for e in entries)
    if not total > 0:
        raise ConfigError(f"{where}: the weights sum to {total:g}; they must sum to a positive "
                          "number (each weight is a relative share >= 0)")
    return entries


def check_env_ids(entries: Sequence[MixtureEntry], where: str) -> None:
    """Every id must be registered with gymnasium (the coa ids register on import)."""
    import gymnasium as gym

    import coa_envs  # noqa: F401 - registers the coa ids
    from coa_envs.registry import suggest_id

    for entry in entries:
        if entry.id not in gym.envs.registry:
            raise ConfigError(f"{where}: unknown env id {entry.id!r}{suggest_id(entry.id)}; `coa list` shows them")


def normalised_weights(entries: Sequence[MixtureEntry]) -> list[float]:
    total = sum(e.weight for e in entries)
    return [e.weight / total for e in entries]


def choose(entries: Sequence[MixtureEntry], seed: int, step: int, slot: int) -> int:
    """Index of the env drawn for ``slot`` of ``step``: weighted, a pure function of its
    arguments (reproducible, and resumable without state)."""
    if len(entries) == 1:
        return 0
    cumulative = list(itertools.accumulate(normalised_weights(entries)))
    draw = random.Random(f"{seed}:mixture:{step}:{slot}").random()
    return min(bisect.bisect_right(cumulative, draw), len(entries) - 1)
