"""The ``code`` tool agent: run model-written Python in the sandbox, report what it printed.

The tool is a thin adapter: isolation, limits and backends belong to :mod:`sandbox`. Every
outcome (error, timeout, memory, refused syscall, used-up quota) is rendered for the model and
tagged with an error kind; nothing is raised to the env. Configuration errors (an unknown
limit, a granted path that does not exist, a limit the chosen backend cannot honour) are
raised when the tool is built, not when the model first calls it.
"""

from __future__ import annotations

import dataclasses
import threading

import sandbox
from coa_envs.options import Schema, did_you_mean
from coa_envs.types import ErrorKind, ToolContext, ToolResult, ToolSpec
from sandbox import ExecResult, Grants, Limits, Status

__all__ = ["BACKENDS", "SPEC", "STATEFUL_BACKENDS", "CodeTool", "build", "option_schema", "render_exec_result"]

SPEC = ToolSpec(name="code", usage="```python\n...\n```", argument="a Python program; print() what you need to see",
                summary="run Python in a sandbox; print() what you need to see.", parameter="code")

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
        Status.OUTPUT_LIMIT: "Output was cut: it exceeded the output, file or disk limit.",
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
    calls :meth:`end_episode` on reset/close, which shuts that interpreter down. ``grants``:
    host paths the code may see beyond the sandbox's allowlist root; with any, the tool runs
    on a backend of its own instead of the process-wide default.
    """

    name = "code"

    def __init__(
        self,
        backend: str = "default",
        limits: Limits | None = None,
        *,
        stateful: bool = False,
        grants: Grants | None = None,
    ):
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
        self.grants = grants or Grants()
        problems = sandbox.backends.unsupported_by(self._known_backend(), self.limits)
        if problems:  # known now for a named backend (sessions run on pool workers); else per run
            raise sandbox.UnsupportedLimits(f"code tool, backend {backend!r}: " + "; ".join(problems))
        self._backend_instance = None
        self._lock = threading.Lock()  # the rollout runner calls one tool from many threads

    def _runner(self):
        if self.backend == "default" and not self.grants:  # per call: a reconfigured default is honoured
            return sandbox.run
        with self._lock:
            if self._backend_instance is None:
                from sandbox.backends import configured_name, get_backend

                name = configured_name() if self.backend == "default" else self.backend
                # The unisolated backend sees the whole host anyway: grants mean nothing to it.
                options = {} if name == "subprocess" else dataclasses.asdict(self.grants)
                self._backend_instance = get_backend(name, **options)
            return self._backend_instance.run

    def _known_backend(self) -> str | None:
        """The backend the calls will run on when it is known without starting one."""
        if self._unisolated():
            return "subprocess"
        if self.stateful:
            return "pool"
        return None if self.backend in ("default", "auto") else self.backend

    def _unisolated(self) -> bool:
        """Sessions follow an explicit opt-in to the unisolated backend, by name or as the default."""
        if self.backend == "subprocess":
            return True
        from sandbox.backends import configured_name

        return self.backend == "default" and configured_name() == "subprocess"

    def _session(self, ctx: ToolContext) -> sandbox.Session:
        session = ctx.state.get(_SESSION_KEY)
        if session is None:
            jail = False if self._unisolated() else None
            session = sandbox.Session(self.limits, jail=jail, **dataclasses.asdict(self.grants))
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


def option_schema(backend: str) -> Schema:
    """``build``'s own options plus every :class:`sandbox.Limits` field (checked at make time)."""
    own = Schema.of_callable("tools.code", build, skip=("backend",))
    limits = Schema.of_dataclass("tools.code", Limits, minimums={f.name: 0 for f in dataclasses.fields(Limits)})
    return Schema("tools.code", own.options).merged(limits)


def build(
    backend: str = "default",
    stateful: bool = False,
    preset: str | None = None,
    read_only_paths: list[str] | tuple[str, ...] = (),
    writable_paths: list[str] | tuple[str, ...] = (),
    **limits: float | int | bool,
) -> CodeTool:
    """``stateful`` picks notebook-style sessions; ``preset`` names a :data:`sandbox.PRESETS` entry
    (``nsjail_seed``: the seed's 5 s CPU / 7 s wall / 5000 MB / 1536 characters); the remaining
    keys are :class:`sandbox.Limits` fields and override the preset's (``disk_mb`` and
    ``max_files`` are the run's scratch-space quotas). ``read_only_paths``/``writable_paths``
    grant host paths (absolute, existing; checked here)."""
    if preset is not None and preset not in sandbox.PRESETS:
        raise ValueError(f"unknown sandbox preset {preset!r}{did_you_mean(preset, sandbox.PRESETS)}; "
                         f"choose one of {sorted(sandbox.PRESETS)}")
    fields = {field.name for field in dataclasses.fields(Limits)}
    unknown = sorted(set(limits) - fields)
    if unknown:
        raise ValueError(f"unknown code tool option(s) {unknown}; allowed: backend, stateful, preset, "
                         f"read_only_paths, writable_paths, {', '.join(sorted(fields))}")
    base = sandbox.PRESETS[preset] if preset else Limits()
    grants = Grants(tuple(read_only_paths), tuple(writable_paths))
    return CodeTool(backend=backend, limits=base.with_(**limits), stateful=stateful, grants=grants)
