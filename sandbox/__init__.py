"""Isolated execution of untrusted, model-written code.

One API whatever the backend: ``run(code, stdin=None, limits=Limits()) -> ExecResult``.
This package imports nothing from the rest of the project.
"""

from sandbox.types import NSJAIL_SEED_PRESET, ExecResult, Limits, Status

__all__ = ["ExecResult", "Limits", "NSJAIL_SEED_PRESET", "Status", "run"]


def run(code: str, stdin: str | None = None, limits: Limits | None = None) -> ExecResult:
    """Run ``code`` with the default backend (see :mod:`sandbox.backends`)."""
    from sandbox.backends import default_backend

    return default_backend().run(code, stdin=stdin, limits=limits or Limits())
