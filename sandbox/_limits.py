"""Applying :class:`~sandbox.types.Limits` to the current process (called in the child)."""

from __future__ import annotations

import math
import resource

from sandbox.types import Limits

__all__ = ["apply_rlimits", "clean_environment"]


def apply_rlimits(limits: Limits, address_space_base: int = 0) -> None:
    """Set CPU, address-space, process, file-size and open-file limits (soft = hard).

    CPU soft = hard makes the kernel send SIGKILL at the limit, which the code cannot catch.
    ``address_space_base`` is the virtual size already mapped by a preloaded worker, so the
    run gets ``memory_mb`` on top of what the shared, already-imported modules take.
    """
    cpu = max(1, math.ceil(limits.cpu_s))
    memory = address_space_base + limits.memory_mb * 1024 * 1024
    pairs = [
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_NPROC, limits.max_processes),
        (resource.RLIMIT_FSIZE, limits.max_file_mb * 1024 * 1024),
        (resource.RLIMIT_NOFILE, limits.max_open_files),
        (resource.RLIMIT_CORE, 0),
    ]
    for which, value in pairs:
        resource.setrlimit(which, (value, value))


def clean_environment(workdir: str) -> dict[str, str]:
    """The whole environment a run sees: nothing inherited, so no host secret can leak."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
