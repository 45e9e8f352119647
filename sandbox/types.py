"""The sandbox contract: limits in, a typed result out. Stdlib only; imports nothing else."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

__all__ = ["LIMIT_NAMES", "NSJAIL_SEED_PRESET", "PRESETS", "ExecResult", "Limits", "Status", "UnsupportedLimits"]


class Status(StrEnum):
    """How a run ended. ``violation`` means the sandbox refused something the code tried.
    :attr:`ExecResult.limit_hit` says which limit, when a limit ended or shaped the run."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_LIMIT = "output_limit"
    VIOLATION = "violation"


class UnsupportedLimits(ValueError):
    """A backend was asked for a limit or permission it cannot enforce (e.g. network access
    from the pool, which never grants it). Raised instead of running with it silently dropped."""


#: The largest value of each limit: far above any run's needs, and within what the kernel's
#: rlimits, the wall-clock waits and the cgroup files can take (10^6 s is 11.6 days).
_MAXIMUM = {"cpu_s": 10**6, "wall_s": 10**6, "memory_mb": 2**40, "max_processes": 2**22, "max_file_mb": 2**40,
            "max_open_files": 2**20, "max_output_chars": 2**40, "disk_mb": 2**40, "max_files": 2**40}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits for one run. Defaults suit a single `<code>` tool call.

    ``memory_mb``, ``cpu_s`` and ``max_processes`` hold for the whole run, every process and
    thread of it together (a cgroup per run; see the promises page for the accounting model):
    memory includes the kernel memory the run makes the kernel hold and the files it writes to
    its scratch space; processes count threads. A backend without cgroups refuses these unless
    its per-process mode was chosen explicitly (``accounting="process"``).
    ``disk_mb`` and ``max_files`` are the quotas of the run's scratch space (``/tmp``, its
    workdir and ``/dev/shm``: one tmpfs): bytes, and files plus directories. Using one up, or
    writing a file past ``max_file_mb``, ends as ``output_limit`` with a note on stderr.
    ``network`` asks for network access; a backend that cannot grant it refuses the run
    (:class:`UnsupportedLimits`) rather than running without it. Times are finite seconds (at
    most 10^6); counts and sizes are whole numbers (``512.0`` is taken as ``512``).
    """

    cpu_s: float = 5.0
    wall_s: float = 7.0
    memory_mb: int = 1024
    max_processes: int = 32
    max_file_mb: int = 16
    max_open_files: int = 64
    max_output_chars: int = 16_384
    network: bool = False
    disk_mb: int = 64
    max_files: int = 4096

    def __post_init__(self) -> None:
        minimum = {"cpu_s": 0.01, "wall_s": 0.01, "memory_mb": 16, "max_processes": 1, "max_file_mb": 1,
                   "max_open_files": 8, "max_output_chars": 0, "disk_mb": 1, "max_files": 1}  # fmt: skip
        for name, low in minimum.items():
            value = getattr(self, name)
            # NaN passed ``value < low`` and made the pool's wait raise (losing the worker), a
            # huge or infinite time overflowed the waits, a float count failed inside the run.
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= low:
                raise ValueError(f"Limits.{name} must be a number >= {low}, got {value!r}")
            if not value <= _MAXIMUM[name]:
                raise ValueError(f"Limits.{name} must be at most {_MAXIMUM[name]}, got {value!r}")
            if name not in ("cpu_s", "wall_s"):
                if value != int(value):
                    raise ValueError(f"Limits.{name} must be a whole number, got {value!r}")
                object.__setattr__(self, name, int(value))
        if not isinstance(self.network, bool):
            raise ValueError(f"Limits.network must be true or false, got {self.network!r}")

    def with_(self, **changes: object) -> Limits:
        return replace(self, **changes)  # type: ignore[arg-type]


# The seed ran model code under nsjail with these limits (5 s CPU, 7 s wall, 5000 MB,
# output cut at 1536 characters); offered as a preset so its numbers can be reproduced.
NSJAIL_SEED_PRESET = Limits(cpu_s=5.0, wall_s=7.0, memory_mb=5000, max_output_chars=1536)

#: Named limit sets, so configs can say ``preset: nsjail_seed`` instead of four numbers.
PRESETS: dict[str, Limits] = {"default": Limits(), "nsjail_seed": NSJAIL_SEED_PRESET}


#: Values of :attr:`ExecResult.limit_hit`.
LIMIT_NAMES = ("timeout", "memory_limit", "process_limit", "output_limit")


@dataclass(frozen=True, slots=True)
class ExecResult:
    """Outcome of one run. ``truncated`` is true when stdout or stderr was cut.

    ``limit_hit`` names the limit that ended or shaped the run, None when none did:
    ``timeout`` (``cpu_s`` of all its processes together, or ``wall_s``), ``memory_limit``
    (``memory_mb``: the kernel killed one of its processes, or Python raised ``MemoryError``),
    ``process_limit`` (``max_processes``: a fork or thread was refused), ``output_limit``
    (output, file size, disk or file-count quota). ``cpu_s`` is the CPU time of every process of
    the run, as the kernel counted it.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    status: Status
    wall_s: float
    cpu_s: float
    truncated: bool = False
    limit_hit: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK
