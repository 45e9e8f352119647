"""Import ``bm25s`` without letting it start JAX on the GPU.

``bm25s.selection`` runs ``jax.lax.top_k`` at import time whenever JAX is installed, to pick
a top-k backend. On a GPU machine that initialises JAX's CUDA backend, which by default
preallocates 75% of the device's memory: on an H100 a process that merely built a search
index held ~60 GB, and the SFT benchmark in the same process ran out of memory at 17 GB of
its own tensors (found by ``benchmarks/gpu_check.sh``). Our indexes rank with numpy or numba,
so ``bm25s`` is imported with ``jax`` hidden; a process that imported JAX itself, before, keeps
it (and bm25s may then use it, as the user chose).
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType

__all__ = ["import_bm25s"]

_lock = threading.Lock()


def import_bm25s() -> ModuleType:
    """The ``bm25s`` module, imported (once) so that its import does not import JAX."""
    module = sys.modules.get("bm25s")
    if module is not None:
        return module
    with _lock:
        if "jax" in sys.modules:  # the user's own JAX: leave it to bm25s
            import bm25s

            return bm25s
        hidden = {name: sys.modules.get(name) for name in ("jax", "jax.lax")}
        for name in hidden:
            sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
        try:
            import bm25s
        finally:
            for name, previous in hidden.items():
                if previous is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = previous
        return bm25s
