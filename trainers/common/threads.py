"""torch's intra-op thread count for the length of a run, given back afterwards.

A trainer's ``resources.torch_threads`` is a process-wide torch setting; a run inside a
longer-lived process (a test session, a notebook, the RL warm start) must not leave it
changed. On a small shared CPU one thread is often several times faster than two: OpenMP
workers spin-wait for a core another process holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["torch_threads"]


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """``torch.set_num_threads(count)`` inside the block (0 keeps torch's choice)."""
    import torch

    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
