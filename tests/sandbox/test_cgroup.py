"""The cgroup module, v1 and v2, against fake cgroupfs layouts and (v2's core files) the real one.

This machine mounts cgroup v1 controllers; its v2 hierarchy has none of them. So v2 logic is
checked here on a fake directory layout whose ``mkdir`` makes the interface files the kernel
would (which files are written with which values, how counters are parsed, how the hierarchy
is found), and freezing, killing and CPU time, which v2 offers without any controller, on the
real v2 mount when it is writable.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

import pytest

from sandbox import _cgroup
from sandbox._cgroup import Cgroup, CgroupUnavailable, attach_self, write_limits
from sandbox._cgroup_probe import locate

MB = 1 << 20
V2_FILES = {"cgroup.procs": "", "cgroup.controllers": "memory pids", "cgroup.subtree_control": "",
            "memory.max": "max", "memory.swap.max": "max", "pids.max": "max", "cpu.stat": "usage_usec 0\n",
            "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", "pids.events": "max 0\n",
            "memory.peak": "0\n", "cgroup.freeze": "0", "cgroup.events": "populated 0\nfrozen 0\n",
            "cgroup.kill": ""}  # fmt: skip
V1_FILES = {
    "memory": {"cgroup.procs": "", "memory.limit_in_bytes": "9223372036854771712",
               "memory.memsw.limit_in_bytes": "9223372036854771712",
               "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
               "memory.max_usage_in_bytes": "0\n"},
    "pids": {"cgroup.procs": "", "pids.max": "max", "pids.events": "max 0\n"},
    "cpuacct": {"cgroup.procs": "", "cpuacct.usage": "0\n"},
    "freezer": {"cgroup.procs": "", "freezer.state": "THAWED\n"},
}  # fmt: skip


class _FakeCgroupfs:
    """``os`` for :mod:`sandbox._cgroup`, but ``mkdir`` also makes a cgroup's interface files
    (of the hierarchy the parent directory belongs to) and ``rmdir`` takes them away."""

    def __init__(self, files_by_root: dict[str, dict[str, str]]) -> None:
        self._files = files_by_root

    def __getattr__(self, name: str):
        return getattr(os, name)

    def open(self, path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if flags & os.O_WRONLY:  # a cgroup file takes the value written; a plain file must be truncated
            flags |= os.O_TRUNC
        return os.open(path, flags, mode, dir_fd=dir_fd)

    def _files_for(self, directory: str) -> dict[str, str]:
        return next(files for root, files in self._files.items() if directory.startswith(root))

    def mkdir(self, name: str, mode: int = 0o777, *, dir_fd: int) -> None:
        os.mkdir(name, mode, dir_fd=dir_fd)
        parent = os.readlink(f"/proc/self/fd/{dir_fd}")
        for file, content in self._files_for(parent).items():
            Path(parent, name, file).write_text(content)

    def rmdir(self, path: str, *, dir_fd: int | None = None) -> None:
        target = path if dir_fd is None else os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        shutil.rmtree(target)


@pytest.fixture()
def fake_v2(tmp_path, monkeypatch):
    root = tmp_path / "unified"
    root.mkdir()
    for file, content in V2_FILES.items():
        (root / file).write_text(content)
    monkeypatch.setattr(_cgroup, "os", _FakeCgroupfs({str(root): V2_FILES}))
    group = Cgroup.open(2, {"unified": str(root)})
    yield group, root
    group.close()


@pytest.fixture()
def fake_v1(tmp_path, monkeypatch):
    roots = {}
    for controller, files in V1_FILES.items():
        root = tmp_path / controller / "mine"
        root.mkdir(parents=True)
        for file, content in files.items():
            (root / file).write_text(content)
        roots[controller] = root
    monkeypatch.setattr(_cgroup, "os", _FakeCgroupfs({str(tmp_path / c): f for c, f in V1_FILES.items()}))
    group = Cgroup.open(1, {controller: str(root) for controller, root in roots.items()})
    yield group, roots
    group.close()


def test_v2_run_cgroup_gets_its_limits_from_the_child_and_the_child_joins_it(fake_v2):
    home, root = fake_v2
    run = home.child("run-1")
    attach, limits = run.open_for_child()
    assert [kind for _, kind in limits] == ["memory", "swap", "pids"]
    attach_self(attach)
    write_limits(limits, memory_mb=128, max_processes=8)
    run_dir = root / "run-1"
    assert (run_dir / "cgroup.procs").read_text() == "0"  # "the writing process"
    assert (run_dir / "memory.max").read_text() == str(128 * MB)
    assert (run_dir / "memory.swap.max").read_text() == "0"  # no swap to hide memory in
    assert (run_dir / "pids.max").read_text() == "8"
    run.close()


def test_v2_delegated_home_enables_the_controllers_for_its_children(fake_v2):
    home, root = fake_v2
    delegated = home.child("home-1", delegate=True)
    assert (root / "home-1" / "cgroup.subtree_control").read_text() == "+memory +pids"
    delegated.close()


def test_v2_counters_say_which_limit_was_hit(fake_v2):
    home, root = fake_v2
    run = home.child("run-2")
    (root / "run-2" / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    (root / "run-2" / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\n")
    (root / "run-2" / "pids.events").write_text("max 3\n")
    (root / "run-2" / "memory.peak").write_text(f"{200 * MB}\n")
    usage = run.usage(peak=True)
    assert (usage.cpu_s, usage.oom_kills, usage.process_limit_hits, usage.memory_peak) == (1.5, 2, 3, 200 * MB)
    run.close()


def test_v2_freeze_thaw_and_kill_write_the_v2_files(fake_v2):
    home, root = fake_v2
    run = home.child("run-3")
    (root / "run-3" / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    assert run.freeze() is True
    assert (root / "run-3" / "cgroup.freeze").read_text() == "1"
    run.thaw()
    assert (root / "run-3" / "cgroup.freeze").read_text() == "0"
    assert run.kill() is True  # cgroup.procs is empty: nothing left
    assert (root / "run-3" / "cgroup.kill").read_text() == "1"
    assert run.remove(parent=home) is True and not (root / "run-3").exists()


def test_v1_spreads_the_same_over_controller_hierarchies(fake_v1):
    home, roots = fake_v1
    run = home.child("run-1")
    attach, limits = run.open_for_child()
    assert len(attach) == 4 and [kind for _, kind in limits] == ["memory", "memsw", "pids"]
    attach_self(attach)
    write_limits(limits, memory_mb=64, max_processes=16)
    assert all((root / "run-1" / "cgroup.procs").read_text() == "0" for root in roots.values())
    assert (roots["memory"] / "run-1" / "memory.limit_in_bytes").read_text() == str(64 * MB)
    assert (roots["memory"] / "run-1" / "memory.memsw.limit_in_bytes").read_text() == str(64 * MB)
    assert (roots["pids"] / "run-1" / "pids.max").read_text() == "16"
    (roots["cpuacct"] / "run-1" / "cpuacct.usage").write_text("2500000000\n")
    (roots["memory"] / "run-1" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    (roots["pids"] / "run-1" / "pids.events").write_text("max 4\n")
    usage = run.usage()
    assert (usage.cpu_s, usage.oom_kills, usage.process_limit_hits) == (2.5, 1, 4)
    (roots["freezer"] / "run-1" / "freezer.state").write_text("FROZEN\n")
    assert run.freeze() is True and (roots["freezer"] / "run-1" / "freezer.state").read_text() == "FROZEN"
    run.thaw()
    assert (roots["freezer"] / "run-1" / "freezer.state").read_text() == "THAWED"
    assert run.remove(parent=home) is True
    assert not any((root / "run-1").exists() for root in roots.values())


MOUNTINFO_V1 = """\
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 30 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 30 0:31 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
"""
CGROUP_V1 = "0::/\n4:memory:/jobs/7\n3:pids:/\n2:cpu,cpuacct:/user\n"
MOUNTINFO_V2 = "31 25 0:27 /kubepods /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
CGROUP_V2 = "0::/kubepods/pod1\n"


def test_the_hierarchies_are_found_from_mountinfo(tmp_path):
    (tmp_path / "mountinfo").write_text(MOUNTINFO_V1)
    (tmp_path / "cgroup").write_text(CGROUP_V1)
    version, paths = locate(str(tmp_path / "mountinfo"), str(tmp_path / "cgroup"))
    assert version == 1
    assert paths == {"memory": "/sys/fs/cgroup/memory/jobs/7", "pids": "/sys/fs/cgroup/pids",
                     "cpuacct": "/sys/fs/cgroup/cpu,cpuacct/user"}  # co-mounted cpu,cpuacct; no freezer


def test_a_missing_controller_is_named(tmp_path):
    (tmp_path / "mountinfo").write_text(MOUNTINFO_V1.replace("rw,pids", "rw,blkio"))
    (tmp_path / "cgroup").write_text(CGROUP_V1)
    with pytest.raises(CgroupUnavailable, match="pids"):
        locate(str(tmp_path / "mountinfo"), str(tmp_path / "cgroup"))


def test_v2_is_chosen_when_it_has_the_controllers(tmp_path, monkeypatch):
    mount = tmp_path / "sys-fs-cgroup"
    (mount / "pod1").mkdir(parents=True)
    (mount / "pod1" / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "mountinfo").write_text(MOUNTINFO_V2.replace("/sys/fs/cgroup", str(mount)))
    (tmp_path / "cgroup").write_text(CGROUP_V2)
    assert locate(str(tmp_path / "mountinfo"), str(tmp_path / "cgroup")) == (2, {"unified": str(mount / "pod1")})
    (mount / "pod1" / "cgroup.controllers").write_text("cpuset cpu io\n")  # no memory/pids here: v1 or nothing
    with pytest.raises(CgroupUnavailable):
        locate(str(tmp_path / "mountinfo"), str(tmp_path / "cgroup"))


# -- the real v2 hierarchy: freezing, killing and CPU time need no controller --------------------
def _real_v2() -> Cgroup:
    mounts = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
    line = next((line for line in mounts.splitlines() if " - cgroup2 " in line), None)
    cgroups = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    own = next((line[3:] for line in cgroups if line.startswith("0::")), None)
    if line is None or own is None:
        pytest.skip("no cgroup v2 hierarchy here")
    directory = os.path.normpath(line.split()[4] + "/" + own.strip())
    if not os.access(directory, os.W_OK) or not os.path.exists(f"{directory}/cgroup.procs"):
        pytest.skip(f"cannot write below {directory}")
    parent = Cgroup.open(2, {"unified": directory})
    try:
        child = parent.child(f"coa-test-{uuid.uuid4().hex[:8]}")
    except OSError as exc:
        parent.close()
        pytest.skip(f"cannot make a v2 cgroup here: {exc}")
    parent.close()
    if not (os.path.exists(f"{child.paths['unified']}/cgroup.freeze")):
        child.remove()
        pytest.skip("this kernel's v2 has no cgroup.freeze")
    return child


def test_real_v2_freezes_counts_and_kills_a_process_and_its_children():
    group = _real_v2()
    joined_r, joined_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - a spinner that forks a second one once it is in the group
        os.read(joined_r, 1)
        if os.fork() == 0:
            while True:
                pass
        while True:
            pass
    try:
        group.add(pid)
        os.write(joined_w, b"1")
        time.sleep(0.3)
        assert len(group.pids()) == 2  # the child and the grandchild it forked inside
        assert group.cpu_s() > 0.05  # usage_usec of the v2 core cpu.stat
        assert group.freeze() is True
        frozen_at = group.cpu_s()
        time.sleep(0.3)
        assert group.cpu_s() - frozen_at < 0.02  # frozen: no CPU at all
        group.thaw()
        assert group.kill() is True  # cgroup.kill (or freeze + SIGKILL): the grandchild too
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        assert group.pids() == []
    finally:
        for leftover in [pid, *group.pids()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(leftover, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        os.close(joined_r)
        os.close(joined_w)
        assert group.remove() is True


def test_a_cgroup_still_busy_is_removed_on_a_later_try(fake_v2, monkeypatch):
    """A run's processes may still be exiting when its cgroup is removed (EBUSY): the backend
    tries again before its next run, through the handle the first try closed. That second try
    raised TypeError (it looked for the processes to kill through closed descriptors), which
    failed the next run on a loaded host."""
    home, root = fake_v2
    run = home.child("run-busy")
    fake_os, busy = _cgroup.os, [True]

    class _BusyOnce(_FakeCgroupfs):
        def rmdir(self, path: str, *, dir_fd: int | None = None) -> None:
            if busy.pop() if busy else False:
                raise OSError(errno.EBUSY, "Device or resource busy")
            fake_os.rmdir(path, dir_fd=dir_fd)

    monkeypatch.setattr(_cgroup, "os", _BusyOnce({str(root): V2_FILES}))
    assert run.remove(parent=home) is False and (root / "run-busy").exists()
    assert run.remove(parent=home) is True and not (root / "run-busy").exists()
