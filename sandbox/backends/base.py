"""What every backend provides. A backend is anything with this shape; no base class needed."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sandbox.types import ExecResult, Limits

__all__ = ["Backend", "BackendUnavailable"]


class BackendUnavailable(RuntimeError):
    """The backend cannot run on this machine (missing binary, kernel feature or daemon)."""


@runtime_checkable
class Backend(Protocol):
    """Runs one snippet in isolation. Must be safe to call from many threads at once."""

    name: str
    #: Human-readable list of the isolation layers actually in force, for logs and reports.
    isolation: tuple[str, ...]

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult: ...

    def close(self) -> None: ...
