"""The ``code`` tool agent: run model-written Python in the sandbox, report what it printed.

The tool is a thin adapter: isolation, limits and backends belong to :mod:`sandbox`. Every
outcome (error, timeout, memory, refused syscall) is rendered for the model and tagged with
an error kind; nothing is raised to the env.
"""

from __future__ import annotations

import threading

import sandbox
from coa_envs.types import ErrorKind, ToolContext, ToolResult, ToolSpec
from sandbox import ExecResult, Limits, Status

__all__ = ["BACKENDS", "SPEC", "STATEFUL_BACKENDS", "CodeTool", "build", "render_exec_result"]

SPEC = ToolSpec(name="code", usage="```python\n...\n```", argument="a Python program; print() what you need to see",
                summary="run Python in a sandbox; print() what you need to see.")

BACKENDS = ("default", "auto", "pool", "subprocess", "bwrap", "nsjail", "docker")
#: Sessions run on the pool's worker code (jailed, or unjailed for "subprocess"); the
#: one-process-per-run wrappers (bwrap, nsjail, docker) cannot keep an interpreter alive.
STATEFUL_BACKENDS = ("default", "auto", "pool", "subprocess")

_SESSION_KEY = "code_session"

_STATUS_KIND = {
    Status.TIMEOUT: ErrorKind.TOOL_TIMEOUT,
    Status.VIOLATION: ErrorKind.SANDBOX_VIOLATION,
    Status.MEMORY: ErrorKind.TOOL_ERROR,
    Status.OUTPUT_LIMIT: ErrorKind.TOOL_ERROR,
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
    """Runs ``<code>`` calls in the sandbox.

    Stateless by default (every call is a fresh interpreter, the seed's behaviour). With
    ``stateful=True`` each episode gets its own jailed :class:`sandbox.Session`, so names a
    cell defines stay visible to the episode's later cells, like a notebook kernel; the env
    calls :meth:`end_episode` on reset/close, which shuts that interpreter down.
    """

    name = "code"

    def __init__(self, backend: str = "default", limits: Limits | None = None, *, stateful: bool = False):
        if backend not in BACKENDS:
            raise ValueError(f"unknown code backend {backend!r}; choose one of {list(BACKENDS)}")
        if stateful and backend not in STATEFUL_BACKENDS:
            raise ValueError(
                f"code backend {backend!r} cannot keep state between calls; stateful=True needs one of "
                f"{list(STATEFUL_BACKENDS)}"
            )
        self.backend = backend
        self.limits = limits or Limits()
        self.stateful = stateful
        self._backend_instance = None
        self._lock = threading.Lock()  # the rollout runner calls one tool from many threads

    def _runner(self):
        if self.backend == "default":  # resolved per call so a reconfigured default is honoured
            return sandbox.run
        with self._lock:
            if self._backend_instance is None:
                from sandbox.backends import get_backend

                self._backend_instance = get_backend(self.backend)
            return self._backend_instance.run

    def _session(self, ctx: ToolContext) -> sandbox.Session:
        session = ctx.state.get(_SESSION_KEY)
        if session is None:
            # "subprocess" was chosen for machines without namespaces: do not even try them.
            session = sandbox.Session(self.limits, jail=False if self.backend == "subprocess" else None)
            ctx.state[_SESSION_KEY] = session
        return session

    def run(self, query: str, ctx: ToolContext) -> ToolResult:
        try:
            if self.stateful:
                result = self._session(ctx).run(query, limits=self.limits)
            else:
                result = self._runner()(query, stdin=None, limits=self.limits)
        except Exception as exc:  # a broken backend is reported, never raised into the env
            return ToolResult.failure(f"Code execution failed: {type(exc).__name__}: {exc}", ErrorKind.TOOL_ERROR)
        text = render_exec_result(result)
        kind = _STATUS_KIND.get(result.status)
        details = {"status": str(result.status), "exit_code": result.exit_code, "cpu_s": result.cpu_s}
        if kind is None:
            return ToolResult(text=text, ok=True, details=details)
        return ToolResult(text=text, ok=False, error_kind=kind, details=details)

    def end_episode(self, ctx: ToolContext) -> None:
        """Shut down the episode's interpreter (stateful mode); a no-op when stateless."""
        session = ctx.state.pop(_SESSION_KEY, None)
        if session is not None:
            session.close()

    def close(self) -> None:
        with self._lock:
            instance, self._backend_instance = self._backend_instance, None
        if instance is not None:
            instance.close()


def build(
    backend: str = "default", stateful: bool = False, preset: str | None = None, **limits: float | int | bool
) -> CodeTool:
    """``stateful`` picks notebook-style sessions; ``preset`` names a :data:`sandbox.PRESETS` entry
    (``nsjail_seed``: the seed's 5 s CPU / 7 s wall / 5000 MB / 1536 characters); the remaining
    keys are :class:`sandbox.Limits` fields and override the preset's."""
    if preset is not None and preset not in sandbox.PRESETS:
        raise ValueError(f"unknown sandbox preset {preset!r}; choose one of {sorted(sandbox.PRESETS)}")
    base = sandbox.PRESETS[preset] if preset else Limits()
    return CodeTool(backend=backend, limits=base.with_(**limits), stateful=stateful)
