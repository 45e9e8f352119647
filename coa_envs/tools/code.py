"""The ``code`` tool agent: run model-written Python in the sandbox, report what it printed.

The tool is a thin adapter: isolation, limits and backends belong to :mod:`sandbox`. Every
outcome (error, timeout, memory, refused syscall) is rendered for the model and tagged with
an error kind; nothing is raised to the env.
"""

from __future__ import annotations

import sandbox
from coa_envs.types import ErrorKind, ToolContext, ToolResult
from sandbox import ExecResult, Limits, Status

__all__ = ["BACKENDS", "CodeTool", "build", "render_exec_result"]

BACKENDS = ("default", "pool", "subprocess", "bwrap", "docker")

_STATUS_KIND = {
    Status.TIMEOUT: ErrorKind.TOOL_TIMEOUT,
    Status.VIOLATION: ErrorKind.SANDBOX_VIOLATION,
    Status.MEMORY: ErrorKind.TOOL_ERROR,
    Status.ERROR: ErrorKind.TOOL_ERROR,
}


def render_exec_result(result: ExecResult) -> str:
    """What the model reads: stdout, then stderr, then a one-line status if not ok."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append(("stderr:\n" if result.stdout else "") + result.stderr.rstrip("\n"))
    notes = {
        Status.TIMEOUT: f"Execution timed out after {result.wall_s:.1f} s.",
        Status.MEMORY: "Execution ran out of memory.",
        Status.OUTPUT_LIMIT: "Output was cut: it exceeded the output limit.",
        Status.VIOLATION: "The sandbox refused an operation (network, file system or process limits).",
    }
    if result.status in notes:
        parts.append(notes[result.status])
    elif result.status is Status.ERROR and not result.stderr:
        parts.append(f"Process exited with code {result.exit_code}.")
    if result.truncated and result.status is not Status.OUTPUT_LIMIT:
        parts.append("[output truncated]")
    return "\n".join(parts) if parts else "[no output] (use print() to show values)"


class CodeTool:
    """Stateless execution: every call is a fresh interpreter (the seed's behaviour)."""

    name = "code"

    def __init__(self, backend: str = "default", limits: Limits | None = None):
        self.backend = backend
        self.limits = limits or Limits()

    def _runner(self):  # resolved per call so a reconfigured default backend is honoured
        if self.backend == "default":
            return sandbox.run
        from sandbox.backends import get_backend

        return get_backend(self.backend).run

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        try:
            result = self._runner()(query, stdin=None, limits=self.limits)
        except Exception as exc:  # a broken backend is reported, never raised into the env
            return ToolResult.failure(f"Code execution failed: {type(exc).__name__}: {exc}", ErrorKind.TOOL_ERROR)
        text = render_exec_result(result)
        kind = _STATUS_KIND.get(result.status)
        details = {"status": str(result.status), "exit_code": result.exit_code, "cpu_s": result.cpu_s}
        if kind is None:
            return ToolResult(text=text, ok=True, details=details)
        return ToolResult(text=text, ok=False, error_kind=kind, details=details)


def build(backend: str = "default", **limits: float | int | bool) -> CodeTool:
    return CodeTool(backend=backend, limits=Limits(**limits) if limits else None)  # type: ignore[arg-type]
