"""The sandbox contract: limits in, a typed result out. Stdlib only; imports nothing else."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

__all__ = ["NSJAIL_SEED_PRESET", "PRESETS", "ExecResult", "Limits", "Status"]


class Status(StrEnum):
    """How a run ended. ``violation`` means the sandbox refused something the code tried."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_LIMIT = "output_limit"
    VIOLATION = "violation"


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits for one run. Defaults suit a single `<code>` tool call."""

    cpu_s: float = 5.0
    wall_s: float = 7.0
    memory_mb: int = 1024
    max_processes: int = 32
    max_file_mb: int = 16
    max_open_files: int = 64
    max_output_chars: int = 16_384
    network: bool = False

    def with_(self, **changes: object) -> Limits:
        return replace(self, **changes)  # type: ignore[arg-type]


# The seed ran model code under nsjail with these limits (5 s CPU, 7 s wall, 5000 MB,
# output cut at 1536 characters); offered as a preset so its numbers can be reproduced.
NSJAIL_SEED_PRESET = Limits(cpu_s=5.0, wall_s=7.0, memory_mb=5000, max_output_chars=1536)

#: Named limit sets, so configs can say ``preset: nsjail_seed`` instead of four numbers.
PRESETS: dict[str, Limits] = {"default": Limits(), "nsjail_seed": NSJAIL_SEED_PRESET}


@dataclass(frozen=True, slots=True)
class ExecResult:
    """Outcome of one run. ``truncated`` is true when stdout or stderr was cut."""

    stdout: str
    stderr: str
    exit_code: int | None
    status: Status
    wall_s: float
    cpu_s: float
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.status is Status.OK
