"""Entry script of a run in a process of its own: ``python -I -B _boot.py CONFIG_JSON``.

Used by the subprocess backend and the wrappers (bubblewrap, nsjail): it turns the config into a
set-up process (cgroup joined, scratch mounted, privileges dropped, rlimits set, an init when it
is PID 1) and then hands the code to :mod:`sandbox._harness`, which runs it and reports how it
ended. It imports nothing from the project, because it runs inside a jail that may not see the
project: the harness and :mod:`sandbox._lockdown` are loaded from the files bound beside it.
"""

from __future__ import annotations

import os
import sys
import types


def _sibling(name: str) -> types.ModuleType:
    """``sandbox.<name>`` from the file bound beside this one (the jail has no project)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_coa{name}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _enter_jail(config: dict, lockdown: types.ModuleType) -> None:
    """Lay out the jail's scratch ``/tmp``, drop privileges and load the seccomp program."""
    if config.get("scratch"):  # bubblewrap: we mount the scratch tmpfs and drop to the run's uid
        scratch = config["scratch"]
        if config.get("cgroup_fds"):
            lockdown.enter_cgroup_namespace()  # joined already: the run sees its cgroup as "/"
        carry = [(path, writable) for path, writable in scratch.get("carry", [])]
        hide = scratch.get("hide", [])
        lockdown.make_scratch(scratch["disk_mb"], scratch["max_files"], scratch["uid"], carry, hide)
        handed = config.get("seccomp_fd")
        seccomp = lockdown.CompiledFilter.handed_over(handed) if handed is not None else None
        os.chdir(lockdown.WORKDIR)
        lockdown.drop_privileges(scratch["uid"], seccomp, lockdown.writable_in_jail(scratch.get("writable", [])))
    else:  # nsjail mounted the tmpfs and dropped privileges (no_new_privs set)
        lockdown.make_scratch_dirs()
        if config.get("writable") is not None:
            lockdown.restrict_writes(lockdown.writable_in_jail(config["writable"]))
        if config.get("seccomp_fd") is not None:  # on top of the wrapper's own policy
            lockdown.CompiledFilter.handed_over(config["seccomp_fd"]).load()
    os.chdir(lockdown.WORKDIR)


def _set_rlimits(values: list) -> None:
    import resource

    names = ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE")
    for name, value in zip(names, values, strict=False):
        resource.setrlimit(getattr(resource, name), (int(value), int(value)))
    # No real-time or raised priority (see _limits), no core dump (a core_pattern pipe runs on the host).
    for name in ("RLIMIT_RTPRIO", "RLIMIT_NICE", "RLIMIT_CORE"):
        resource.setrlimit(getattr(resource, name), (0, 0))


def main(argv: list[str]) -> None:
    """``_boot.py CONFIG_JSON``: set up, limit self, run the code, clean up.

    The config says where the code is (``code_fd``), where to report (``status_fd``), the five
    rlimits (CPU, AS, NPROC, FSIZE, NOFILE), and optionally: ``cgroup_fds`` (the run's cgroup,
    joined first), ``scratch`` (mount the quota'd ``/tmp``, drop to ``uid``, load ``seccomp_fd``'s
    program: bubblewrap), ``scratch_dirs`` (lay out a ``/tmp`` the wrapper mounted, load the program
    on top of the wrapper's: nsjail), ``reap`` (a subreaper killing every descendant at the end:
    the unjailed path). Limits are applied here: ``preexec_fn`` is unsafe in a threaded parent.
    """
    import json

    harness = _sibling("_harness")  # compiled before the run's cgroup is joined: not the run's CPU
    config = json.loads(argv[1])
    for fd in config.get("cgroup_fds", ()):  # first: into the run's cgroup, before anything of the run
        os.write(fd, b"0")
        os.close(fd)
    code_fd, status_fd = config["code_fd"], config["status_fd"]
    code = b"".join(iter(lambda: os.read(code_fd, 1 << 20), b"")).decode("utf-8")
    os.close(code_fd)
    jailed = bool(config.get("scratch") or config.get("scratch_dirs"))
    lockdown = _sibling("_lockdown") if jailed or config.get("reap") else None
    if lockdown is not None:  # orphans come to us: a seccomp kill among them is seen (reap: killed at the end)
        lockdown.become_subreaper()
    if jailed:
        _enter_jail(config, lockdown)  # type: ignore[arg-type]
    elif config.get("reap"):
        os.chdir(os.environ.get("HOME") or "/")
    _set_rlimits(config["rlimits"])
    exit_now, end = os._exit, lambda status: harness.report_end(status_fd, status)  # the code's os._exit writes it too
    if lockdown is not None:  # as PID 1 (nsjail) the code runs below an init (its record is the code's own);
        lockdown.fork_init(status_fd, lambda _: None, lambda: harness.write_tag(status_fd, harness.STATUS_DENIED))
        exit_now = lockdown.report_own_exits(end)  # a wrapper's 128 + N is no signal when the code chose it
    code_pid = os.getpid()  # a fork of the code that leaves the snippet is not the run: no end record
    rc = harness.execute(code, status_fd, quota_dir=lockdown.SCRATCH if jailed else None)  # type: ignore[union-attr]
    if os.getpid() == code_pid:
        if config.get("reap"):
            lockdown.kill_children()  # type: ignore[union-attr]
        harness.report_end(status_fd, rc)
    exit_now(rc)


if __name__ == "__main__":
    main(sys.argv)
