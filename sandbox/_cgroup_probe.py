"""Finding this host's cgroup hierarchies and making this process's sandbox cgroup in them.

v2 (one unified hierarchy) is used when its ``memory`` and ``pids`` controllers are available
below this process's cgroup; otherwise v1 (one hierarchy per controller: ``memory``, ``pids``,
``cpuacct``, and ``freezer`` when mounted). Either way the sandbox's cgroups go below the cgroup
this process is in, as ``coa-sandbox-<pid>``, so that whatever limits the caller runs under still
cover its runs. When none can be made, :func:`sandbox_root` raises :class:`CgroupUnavailable`
saying why, and backends refuse per-run limits unless the per-process mode is chosen explicitly.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading

from sandbox._cgroup import UNIFIED, V1_OPTIONAL, V1_REQUIRED, V2_REQUIRED, Cgroup, CgroupUnavailable

__all__ = ["cgroup_unavailable_reason", "locate", "sandbox_root"]

_PREFIX = "coa-sandbox-"
_lock = threading.Lock()
_roots: dict[int, Cgroup | CgroupUnavailable] = {}


def _unescape(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _mounts(mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root within the hierarchy, fs type, super options) of every cgroup mount."""
    found = []
    with open(mountinfo, encoding="utf-8") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
                continue
            found.append((_unescape(fields[4]), _unescape(fields[3]), tail[0], set(tail[2].split(","))))
    return found


def _own(proc_cgroup: str = "/proc/self/cgroup") -> dict[str, str]:
    """This process's cgroup path per controller (``unified`` for v2)."""
    own: dict[str, str] = {}
    with open(proc_cgroup, encoding="utf-8") as handle:
        for line in handle:
            number, controllers, path = line.rstrip("\n").split(":", 2)
            if number == "0" and controllers == "":
                own[UNIFIED] = path
            for controller in controllers.split(","):
                if controller:
                    own[controller] = path
    return own


def _join(mount_point: str, mount_root: str, path: str) -> str:
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root):]
    return os.path.normpath(mount_point + "/" + path.lstrip("/"))


def _v2_dir(mounts: list, own: dict[str, str]) -> str | None:
    for mount_point, root, fstype, _ in mounts:
        if fstype == "cgroup2" and UNIFIED in own:
            directory = _join(mount_point, root, own[UNIFIED])
            try:
                with open(f"{directory}/cgroup.controllers", encoding="ascii") as handle:
                    available = set(handle.read().split())
            except OSError:
                return None
            return directory if set(V2_REQUIRED) <= available else None
    return None


def locate(
    mountinfo: str = "/proc/self/mountinfo", proc_cgroup: str = "/proc/self/cgroup"
) -> tuple[int, dict[str, str]]:
    """(version, hierarchy key -> directory of this process's own cgroup); raises
    :class:`CgroupUnavailable` naming what is missing."""
    mounts, own = _mounts(mountinfo), _own(proc_cgroup)
    directory = _v2_dir(mounts, own)
    if directory is not None:
        return 2, {UNIFIED: directory}
    paths: dict[str, str] = {}
    for controller in (*V1_REQUIRED, *V1_OPTIONAL):
        mount = next((m for m in mounts if m[2] == "cgroup" and controller in m[3]), None)
        if mount is not None and controller in own:
            paths[controller] = _join(mount[0], mount[1], own[controller])
    missing = [c for c in V1_REQUIRED if c not in paths]
    if missing:
        raise CgroupUnavailable(
            f"no cgroup v2 with the {'/'.join(V2_REQUIRED)} controllers and no cgroup v1 hierarchy for "
            f"{', '.join(missing)} (mounted: {sorted({c for m in mounts for c in m[3] if m[2] == 'cgroup'})})"
        )
    return 1, paths


def _sweep_stale(own: Cgroup) -> None:
    """Remove ``coa-sandbox-<pid>`` trees left by processes that died without cleaning up."""
    for path in dict.fromkeys(own.paths.values()):
        with contextlib.suppress(OSError):
            for name in os.listdir(path):
                if not name.startswith(_PREFIX) or not name[len(_PREFIX):].isdigit():
                    continue
                if os.path.exists(f"/proc/{name[len(_PREFIX):]}"):
                    continue
                _remove_tree(f"{path}/{name}")


def _remove_tree(path: str, depth: int = 4) -> None:
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False) and depth:
                _remove_tree(entry.path, depth - 1)
        os.rmdir(path)


def _make_root() -> Cgroup:
    version, paths = locate()
    try:
        own = Cgroup.open(version, paths)
    except OSError as exc:
        raise CgroupUnavailable(f"cannot open this process's cgroup: {exc}") from exc
    try:
        _sweep_stale(own)
        if version == 2:
            enabled = set(own.read(UNIFIED, "cgroup.subtree_control").split())
            if not set(V2_REQUIRED) <= enabled:
                try:
                    own.write(UNIFIED, "cgroup.subtree_control", " ".join(f"+{c}" for c in V2_REQUIRED))
                except OSError as exc:
                    raise CgroupUnavailable(
                        f"cgroup v2: cannot enable {'/'.join(V2_REQUIRED)} below {paths[UNIFIED]} ({exc.strerror}); "
                        "a cgroup that holds processes cannot have controlled children: run the caller in a "
                        "delegated cgroup (e.g. systemd-run --scope -p Delegate=yes)"
                    ) from exc
        return own.child(f"{_PREFIX}{os.getpid()}", delegate=True)
    except OSError as exc:
        raise CgroupUnavailable(f"cannot make a cgroup below {sorted(set(paths.values()))}: {exc}") from exc
    finally:
        own.close()


def sandbox_root() -> Cgroup:
    """This process's ``coa-sandbox-<pid>`` cgroup (made on first use, removed at exit)."""
    pid = os.getpid()
    with _lock:
        if pid not in _roots:
            try:
                _roots[pid] = _make_root()
            except CgroupUnavailable as exc:
                _roots[pid] = exc
            else:
                atexit.register(_remove_root, pid)
        root = _roots[pid]
    if isinstance(root, CgroupUnavailable):
        raise root
    return root


def cgroup_unavailable_reason() -> str | None:
    """Why no per-run cgroup can be made here, or None when it can."""
    try:
        sandbox_root()
    except CgroupUnavailable as exc:
        return str(exc)
    return None


def _remove_root(pid: int) -> None:
    root = _roots.get(pid)
    if isinstance(root, Cgroup) and pid == os.getpid():
        root.close()
        for path in dict.fromkeys(root.paths.values()):
            _remove_tree(path)
