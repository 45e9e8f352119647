"""What every backend provides. A backend is anything with this shape; no base class needed."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sandbox.types import ExecResult, Limits, UnsupportedLimits

__all__ = ["Backend", "BackendUnavailable", "UnsupportedLimits", "refuse_unsendable", "refuse_unsupported"]


class BackendUnavailable(RuntimeError):
    """The backend cannot run on this machine (missing binary, kernel feature or daemon)."""


def refuse_unsupported(backend: str, problems: list[str]) -> None:
    """Raise :class:`UnsupportedLimits` naming every limit ``backend`` cannot honour."""
    if problems:
        raise UnsupportedLimits(f"the {backend!r} sandbox backend cannot honour these limits: " + "; ".join(problems))


def refuse_unsendable(code: object, stdin: object) -> None:
    """Raise before a run starts when ``code`` or ``stdin`` is no text a run can receive: not a
    ``str``, or not encodable as UTF-8 (a lone surrogate, as a JSON ``"\\ud800"`` escape gives).
    Found out half-way, such a request left a pool worker taken for good."""
    for name, text in (("code", code), ("stdin", "" if stdin is None else stdin)):
        if not isinstance(text, str):
            raise TypeError(f"sandbox {name} must be a str, got {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            problem = f"{exc.reason} at position {exc.start}"
            raise ValueError(f"sandbox {name} is not valid Unicode text: {problem}") from None


@runtime_checkable
class Backend(Protocol):
    """Runs one snippet in isolation. Must be safe to call from many threads at once."""

    name: str
    #: Human-readable list of the isolation layers actually in force, for logs and reports.
    isolation: tuple[str, ...]

    def run(self, code: str, *, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
        """Run ``code``; raises :class:`UnsupportedLimits` for limits it cannot enforce."""
        ...

    def unsupported(self, limits: Limits) -> list[str]:
        """What of ``limits`` this backend could not enforce (empty: all of it)."""
        ...

    def close(self) -> None: ...
