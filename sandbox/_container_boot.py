"""What the Docker backend's container runs: the code as PID 2 below an init, as on the pool.

The image has no copy of the project, so :func:`boot_program` puts this module's source, the
harness's and :mod:`sandbox._lockdown`'s on the container's command line; it imports nothing from
the project. The container's first process is PID 1 of its PID namespace, which the kernel gives
only the signals it has a handler for: code running there that killed itself (``os.kill(os.getpid(),
SIGKILL)``, ``signal.alarm``) ran on. So PID 1 forks the code's process and stays behind as its init
(:func:`sandbox._lockdown.fork_init`): it reaps, kills what is left when the code ends, and then
writes the run's *end line* on stderr: how the code ended (exit status or signal) and the CPU
seconds of every process of the run (all reaped by the init). Nothing of the run is left to write
after it, so only a line that ends stderr is the init's; the code can write look-alikes earlier
but cannot follow one. The init is undumpable, so the code (same uid) cannot ptrace it or write
its memory through ``/proc/1/mem``. The harness's status tags travel in the end line too (see :func:`main`).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import types

#: Exit statuses standing for the harness's tags: denied (or the process limit), memory, then
#: the quota tags (disk, files, file size).
DENIED_EXIT, MEMORY_EXIT, FIRST_QUOTA_EXIT = 212, 213, 214
#: What starts the init's end line on stderr (then a JSON object and a newline).
END_LINE = b"\n\x1ecoa-sandbox-end "
_PR_SET_DUMPABLE = 4


def _read_all(fd: int) -> bytes:
    """What a non-blocking pipe holds now."""
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk


def _end_line(harness: types.ModuleType, how: dict, status_r: int, denied: list[bool]) -> None:
    """The init's last word (every process of the run is gone): how the code ended, the CPU of
    all of them, and every distinct byte of the status pipe (the harness's tags)."""
    tags = set(_read_all(status_r)) | ({ord(harness.STATUS_DENIED)} if denied else set())
    line = {**how, "cpu_s": harness.cpu_used(), "tags": bytes(sorted(tags)).decode("latin-1")}
    os.write(2, END_LINE + json.dumps(line).encode() + b"\n")


def exit_for_tags(harness: types.ModuleType, tags: bytes, rc: int) -> int:
    """``rc``, or the reserved exit status of the worst tag in ``tags`` (every tag counts
    wherever it is: a junk byte the code wrote first hides none)."""
    seen = {bytes([byte]) for byte in set(tags)}
    quota = [FIRST_QUOTA_EXIT + index for index, tag in enumerate(harness.QUOTA_TAGS) if tag in seen]
    if harness.STATUS_MEMORY in seen:
        return MEMORY_EXIT
    if harness.STATUS_PROCESS_LIMIT in seen:
        return DENIED_EXIT
    return quota[0] if quota else DENIED_EXIT if harness.STATUS_DENIED in seen else rc


def main(harness: types.ModuleType, lockdown: types.ModuleType, code: str, workdir: str, shm_dir: str) -> None:
    """Run ``code`` below an init (when we are PID 1) in ``workdir``; never returns.

    Below the init, the status pipe's read end is the init's alone (the code cannot read its tags
    back); without one (not PID 1), this process reads them and exits with :func:`exit_for_tags`.
    """
    os.makedirs(workdir, exist_ok=True)
    os.makedirs(shm_dir, exist_ok=True)
    os.chdir(workdir)
    status_r, status_w = os.pipe()
    os.set_blocking(status_r, False)
    os.set_blocking(status_w, False)  # a code that filled the pipe loses its tags (reported), not its run
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # the init (forked below) stays so: no ptrace, no /proc/1/mem
    denied: list[bool] = []
    under_init = lockdown.fork_init(
        2,
        lambda code: _end_line(harness, {"exit": code}, status_r, denied),
        lambda: denied.append(True),
        lambda number: _end_line(harness, {"signal": number}, status_r, denied),
        keep=(status_r,),
    )
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # the code's process: its own /proc/self as usual
    if under_init:
        os.close(status_r)
    rc = harness.execute(code, status_w, quota_dir=(lockdown.SCRATCH, "/dev/shm"))
    os._exit(rc if under_init else exit_for_tags(harness, _read_all(status_r), rc))


def boot_program(harness_source: str, lockdown_source: str, workdir: str, shm_dir: str) -> str:
    """The ``python -c`` program a container runs (its argv[1] is the code)."""
    modules = {"_coa_harness": harness_source, "_coa_lockdown": lockdown_source, "_coa_boot": _own_source()}
    return (
        "import sys, types\n"
        "def _module(name, source):\n"
        "    module = types.ModuleType(name)\n"
        "    exec(compile(source, name + '.py', 'exec'), module.__dict__)\n"
        "    return module\n"
        f"_sources = {modules!r}\n"
        "_harness, _lockdown, _boot = (_module(name, source) for name, source in _sources.items())\n"
        "del _sources\n"
        f"_boot.main(_harness, _lockdown, sys.argv[1], {workdir!r}, {shm_dir!r})\n"
    )


def _own_source() -> str:
    with open(os.path.abspath(__file__), encoding="utf-8") as handle:
        return handle.read()


if __name__ == "__main__":  # pragma: no cover - the container runs boot_program's text instead
    sys.exit("run through the docker backend")
