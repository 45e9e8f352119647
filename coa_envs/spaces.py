"""The env's observation and action space: text of any characters, bounded in length."""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym

__all__ = ["TextSpace"]


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
