"""The env's observation and action space: text of any characters, bounded in length.

``TextSpace`` also works in Gymnasium's vector envs in both modes. ``AsyncVectorEnv`` with
``shared_memory=True`` (the default of ``gym.make_vec(..., vectorization_mode="async")``)
copies observations through a fixed array of character indices of ``Text``'s charset, which
cannot hold what a model or a web page writes (any Unicode) and, for an unwritten slot, reads
back ``max_length`` copies of the charset's first character -- every observation came back as
a 1,000,000-character string of ``'0'``. (Gymnasium reads shared memory once, at
construction, expecting views that follow later writes: right for numpy arrays, never for a
tuple of strings.) The functions below store a ``TextSpace`` value as Unicode code points,
``-1`` past its end, and read it back as :class:`SharedTexts`, a live view whose copy (what
the vector env hands out) is the tuple of the current texts.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import shared_memory

__all__ = ["SharedTexts", "TextSpace"]

_END = -1  # past the end of the text in a shared-memory slot


class TextSpace(gym.spaces.Text):
    """Text space that accepts any Unicode string up to ``max_length``.

    Gymnasium's ``Text`` checks membership against an explicit charset; a model may emit
    any character, so ``contains`` only checks type and length. Sampling still draws from a
    printable charset plus CoA tags so that random actions exercise the parser.
    """

    def __init__(self, max_length: int, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"


@shared_memory.create_shared_memory.register(TextSpace)
def _create(space: TextSpace, n: int = 1, ctx: Any = None) -> Any:
    import multiprocessing

    array = (ctx or multiprocessing).Array(np.dtype(np.int32).char, n * space.max_length, lock=True)
    np.frombuffer(array.get_obj(), dtype=np.int32)[:] = _END  # an unwritten slot reads as ""
    return array


class SharedTexts(Sequence):
    """The texts of ``n`` envs in shared memory, decoded when read (a view, like the numpy
    arrays shared memory gives other spaces); ``copy.deepcopy`` gives the tuple of strings."""

    def __init__(self, space: TextSpace, memory: Any, n: int):
        self._rows = np.frombuffer(memory.get_obj(), dtype=np.int32).reshape((n, space.max_length))

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        row = self._rows[index]
        ends = np.flatnonzero(row == _END)
        length = int(ends[0]) if ends.size else len(row)
        return row[:length].astype("<u4").tobytes().decode("utf-32-le")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@shared_memory.read_from_shared_memory.register(TextSpace)
def _read(space: TextSpace, memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, memory, n)


@shared_memory.write_to_shared_memory.register(TextSpace)
def _write(space: TextSpace, index: int, value: str, memory: Any) -> None:
    if not space.contains(value):
        raise ValueError(f"{space!r} cannot hold a value of type {type(value).__name__} and length "
                         f"{len(value) if isinstance(value, str) else '?'}")
    slot = np.frombuffer(memory.get_obj(), dtype=np.int32)[index * space.max_length:(index + 1) * space.max_length]
    codes = np.frombuffer(value.encode("utf-32-le"), dtype="<u4").astype(np.int32)
    slot[:codes.size] = codes
    slot[codes.size:] = _END
