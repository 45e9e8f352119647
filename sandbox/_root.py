"""The allowlist root: exactly which host paths a run sees, the same for every jailing backend.

A run's file system is assembled, not filtered: the interpreter and the libraries it needs
(read-only), ``/dev/null|zero|random|urandom``, a fresh ``/proc``, its private ``/tmp`` with the
workdir (see :mod:`sandbox._lockdown`), and what the caller granted with ``read_only_paths`` /
``writable_paths``. Nothing else of the host exists in it: no ``/etc``, ``/home``, ``/opt``,
``/srv``, ``/var``, no checkout, no Unix socket. :func:`root_policy` computes the list once
per interpreter; the pool (:mod:`sandbox._jail`), bubblewrap and nsjail each turn it into
mounts their own way. Stdlib only.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from sandbox._lockdown import SCRATCH, SHM_DIR, WORKDIR

__all__ = ["DEVICES", "NETWORK_FILES", "PROJECT_PACKAGES", "Grants", "RootPolicy", "link_chain", "root_policy"]

#: Device nodes a run gets (bound from the host); ``/dev/shm`` is a link to its own scratch space.
DEVICES = ("null", "zero", "random", "urandom")
#: Extra read-only files for a run that was granted network access (name resolution, CA certificates).
NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl", "/usr/share/ca-certificates")
#: Prefixes too broad to expose whole: there only the interpreter's own directories are kept.
_SYSTEM_PREFIXES = ("/", "/usr", "/usr/local")
#: Where shared libraries live; a mapped library outside these (a checkout's build) is not kept.
_LIBRARY_ROOTS = ("/lib", "/lib32", "/lib64", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/local/lib")
#: This project's own top-level packages (pyproject's ``packages.find``). A regular install puts
#: them in site-packages, inside the prefix a run sees, with ``coa_envs/data`` holding tasks'
#: gold answers: wherever they sit inside the root, runs see an empty directory instead.
PROJECT_PACKAGES = ("coa_envs", "agents", "trainers", "sandbox", "coa_cli", "coa_verifiers")
#: Kernel interfaces and the jail's own mount points: never granted.
_NEVER_GRANTED = ("/proc", "/sys", "/dev", WORKDIR, SHM_DIR)

_DESCRIBE = r"""
import json, os, sys, sysconfig
libs = set()
with open("/proc/self/maps") as handle:
    for line in handle:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and ".so" in parts[5]:
            libs.add(parts[5].strip())
shared = sysconfig.get_config_var("Py_ENABLE_SHARED")
import importlib.util
project = []
for name in PROJECT_PACKAGES:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        continue
    for location in (spec.submodule_search_locations or []) if spec else []:
        project.append(os.path.realpath(location))
        parent = os.path.dirname(os.path.realpath(location))
        try:
            siblings = os.listdir(parent)
        except OSError:
            continue
        project += [os.path.join(parent, entry) for entry in siblings
                    if entry.startswith("coa_envs-") and entry.endswith((".dist-info", ".egg-info"))]
# Copies an import does not find (an installed one behind a checkout on sys.path) hold task files too.
import site
for entry in {*sys.path, *getattr(site, "getsitepackages", list)(), getattr(site, "USER_SITE", None) or ""}:
    if entry and os.path.isdir(os.path.join(entry, "coa_envs", "data")):
        project.append(os.path.realpath(os.path.join(entry, "coa_envs")))
print(json.dumps({
    "executable": sys.executable,
    "base_executable": getattr(sys, "_base_executable", sys.executable),
    "prefixes": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}),
    "path": [p for p in sys.path if p],
    "stdlib": sorted({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}),
    "libpython": os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("LDLIBRARY") or "")
    if shared else "",
    "multiarch": sysconfig.get_config_var("MULTIARCH") or "",
    "mapped": sorted(libs),
    "project": sorted(set(project)),
}))
"""


def _under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def _normal(path: str) -> str:
    return os.path.normpath(path) if path.startswith("/") else path


@dataclass(frozen=True, slots=True)
class Grants:
    """Host paths a run may see beyond the allowlist root, checked when the config is built.

    ``read_only_paths`` are visible read-only, ``writable_paths`` writable (a writable grant is
    host storage: the run's disk and file quotas do not cover it). Each path must be absolute,
    written in normal form and exist; ``/``, kernel interfaces (``/proc``, ``/sys``, ``/dev``)
    and the run's own workdir are refused, and so is a writable grant over the interpreter or
    its libraries.
    """

    read_only_paths: tuple[str, ...] = ()
    writable_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("read_only_paths", "writable_paths"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise ValueError(f"{name} must be a list of absolute paths, got {value!r}")
            paths = tuple(value)
            for path in paths:
                _check_grant(name, path)
            object.__setattr__(self, name, paths)
        both = set(self.read_only_paths) & set(self.writable_paths)
        if both:
            raise ValueError(f"{sorted(both)} granted both read-only and writable; list each path once")

    def __bool__(self) -> bool:
        return bool(self.read_only_paths or self.writable_paths)


def _check_grant(name: str, path: object) -> None:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"{name}: {path!r} is not an absolute path")
    if os.path.normpath(path) != path:
        raise ValueError(f"{name}: write {path!r} as {os.path.normpath(path)!r}")
    if path == "/":
        raise ValueError(f"{name}: granting '/' would give the run the whole host; grant the directories it needs")
    for refused in _NEVER_GRANTED:
        if _under(path, refused):
            raise ValueError(f"{name}: {path!r} is not allowed (kernel interfaces and the run's own workdir)")
    if path == SCRATCH:
        raise ValueError(f"{name}: {path!r} is the run's private /tmp; grant a directory below it instead")
    if not os.path.exists(path):
        raise ValueError(f"{name}: {path!r} does not exist")


@dataclass(frozen=True, slots=True)
class RootPolicy:
    """What a run's root holds. Every path appears at the same place as on the host.

    ``read_only``/``writable``: host paths to bind; ``symlinks``: (path, target) links to create
    so that paths reached through a host symlink (``/lib64`` -> ``usr/lib64``) resolve alike;
    ``hidden``: directories inside bound paths that runs see empty (the project's own packages).
    """

    python: str
    read_only: tuple[str, ...]
    writable: tuple[str, ...] = ()
    symlinks: tuple[tuple[str, str], ...] = ()
    devices: tuple[str, ...] = DEVICES
    notes: tuple[str, ...] = field(default=())
    hidden: tuple[str, ...] = ()

    def below_scratch(self) -> tuple[tuple[str, bool], ...]:
        """(path, writable) of the bound paths that the run's fresh ``/tmp`` would cover."""
        entries = [(path, False) for path in self.read_only] + [(path, True) for path in self.writable]
        return tuple(sorted((p, w) for p, w in entries if _under(p, SCRATCH) and p != SCRATCH))

    def with_network_files(self) -> RootPolicy:
        """The same root plus what name resolution and TLS need (for a run granted network)."""
        extra = [path for path in NETWORK_FILES if os.path.exists(path)]
        policy = _assemble(self.python, [*self.read_only, *extra], self.writable, self.symlinks)
        return replace(policy, hidden=self.hidden)

    def describe(self) -> list[str]:
        return [*(f"{p} (read-only)" for p in self.read_only), *(f"{p} (writable)" for p in self.writable)]


def link_chain(path: str, limit: int = 40) -> tuple[list[tuple[str, str]], str]:
    """Resolve ``path`` one component at a time: the symlinks passed (their path and target as
    written) and the real path reached. The links are recreated in the jail, so a path that a
    program names through a link (the ELF loader's ``/lib64/...``) works there too."""
    links: list[tuple[str, str]] = []
    pending = [part for part in path.split("/") if part]
    current = "/"
    while pending:
        name = pending.pop(0)
        candidate = os.path.join(current, name)
        if name == "..":
            current = os.path.dirname(current) or "/"
            continue
        if os.path.islink(candidate):
            if len(links) >= limit:
                raise OSError(f"too many symlinks resolving {path}")
            target = os.readlink(candidate)
            links.append((candidate, target))
            joined = target if target.startswith("/") else os.path.join(current, target)
            pending = [part for part in joined.split("/") if part and part != "."] + pending
            current = "/"
        else:
            current = candidate
    return links, current


def _elf_interpreter(executable: str) -> str | None:
    """The dynamic loader an ELF executable names (``PT_INTERP``), or None (static, not ELF)."""
    try:
        with open(executable, "rb") as handle:
            header = handle.read(64)
            if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit only
                return None
            endian = "<" if header[5] == 1 else ">"
            phoff, = struct.unpack_from(endian + "Q", header, 32)
            phentsize, phnum = struct.unpack_from(endian + "HH", header, 54)
            for index in range(phnum):
                handle.seek(phoff + index * phentsize)
                ptype, _, offset, _, _, size = struct.unpack(endian + "IIQQQQ", handle.read(40))
                if ptype == 3:  # PT_INTERP
                    handle.seek(offset)
                    return handle.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def _describe_script() -> str:
    return f"PROJECT_PACKAGES = {PROJECT_PACKAGES!r}\n" + _DESCRIBE


@functools.lru_cache(maxsize=8)
def _describe(python: str) -> dict:
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        namespace: dict = {}
        from contextlib import redirect_stdout
        from io import StringIO

        buffer = StringIO()
        with redirect_stdout(buffer):
            exec(_describe_script(), namespace)
        return json.loads(buffer.getvalue())
    out = subprocess.run([python, "-I", "-c", _describe_script()], capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    if out.returncode != 0:
        raise OSError(f"cannot inspect the interpreter {python}: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout)


def _interpreter_paths(info: dict) -> list[str]:
    """The interpreter's own files: its prefix (or, for a system-wide prefix such as ``/usr``,
    only its stdlib and site directories), the executable and libpython."""
    wanted = [info["executable"], info["base_executable"]]
    if info["libpython"]:
        wanted.append(info["libpython"])
    prefixes = [p for p in info["prefixes"] if os.path.isdir(p)]
    for prefix in prefixes:
        if os.path.realpath(prefix) not in _SYSTEM_PREFIXES:
            wanted.append(prefix)
    # sys.path entries count only inside a prefix: a path a .pth file adds (a checkout, a
    # dataset) is not the interpreter's, and is granted explicitly if the run needs it.
    for entry in [*info["stdlib"], *info["path"]]:
        if os.path.exists(entry) and any(_under(entry, prefix) for prefix in prefixes):
            wanted.append(entry)
    return wanted


def _library_paths(info: dict) -> list[str]:
    """Directories the dynamic loader finds shared libraries in, and the loader itself."""
    wanted = ["/etc/ld.so.cache"]
    loader = _elf_interpreter(os.path.realpath(info["executable"]))
    if loader:
        wanted.append(loader)
    if info["multiarch"]:
        wanted += [f"/usr/lib/{info['multiarch']}", f"/lib/{info['multiarch']}"]
    for library in info["mapped"]:
        real = os.path.realpath(library)
        if any(_under(real, root) for root in _LIBRARY_ROOTS):
            wanted.append(os.path.dirname(library))
    # C.UTF-8 (what runs use) is built into glibc >= 2.35; Debian's copy is used when present.
    wanted.append("/usr/lib/locale/C.utf8")
    return wanted


def _assemble(
    python: str, read_only: Sequence[str], writable: Sequence[str], symlinks: Iterable[tuple[str, str]] = ()
) -> RootPolicy:
    links: dict[str, str] = dict(symlinks)
    real_ro: set[str] = set()
    for path in read_only:
        if not os.path.lexists(path):
            continue
        chain, real = link_chain(path)
        links.update(chain)
        if os.path.exists(real):
            real_ro.add(real)
    real_rw = {os.path.realpath(path) for path in writable}
    # A path inside another kept one is already visible (and a bind into a read-only bind could
    # not be mounted anyway); a writable grant inside a read-only one is bound on top of it.
    kept_ro = sorted(p for p in real_ro if not any(_under(p, q) and p != q for q in real_ro))
    kept_rw = sorted(p for p in real_rw if not any(_under(p, q) and p != q for q in real_rw))
    kept_ro = [p for p in kept_ro if p not in real_rw]
    kept = [*kept_ro, *kept_rw]
    kept_links = sorted((p, t) for p, t in links.items() if not any(_under(p, q) for q in kept) and p not in kept)
    return RootPolicy(python, tuple(kept_ro), tuple(kept_rw), tuple(kept_links))


def root_policy(python: str | None = None, grants: Grants | None = None) -> RootPolicy:
    """The allowlist root for runs of ``python`` (default: this interpreter) plus ``grants``."""
    python = python or sys.executable
    grants = grants or Grants()
    info = _describe(python)
    system = [*_interpreter_paths(info), *_library_paths(info)]
    policy = _assemble(python, [*system, *grants.read_only_paths], grants.writable_paths)
    # Runs must never write the interpreter, its packages or the libraries it loads: later runs
    # and the host use the same files. A writable grant equal to one of them, inside one (bound
    # on top of it) or containing one is refused.
    system_real = {os.path.realpath(p) for p in system if os.path.lexists(p)}
    for path in policy.writable:
        clash = sorted(kept for kept in system_real if _under(kept, path) or _under(path, kept))
        clash = clash or [kept for kept in policy.read_only if _under(kept, path)]
        if clash and path not in grants.read_only_paths:
            raise ValueError(f"writable_paths: {path!r} overlaps the interpreter's files ({clash[0]}); refused")
    bound = [*policy.read_only, *policy.writable]
    hidden = sorted(
        path for path in info.get("project", [])
        if os.path.isdir(path) and any(_under(path, kept) and path != kept for kept in bound)
    )  # fmt: skip
    return replace(policy, hidden=tuple(hidden))
