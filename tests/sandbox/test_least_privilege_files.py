"""Least privilege over the host's files, attacked on every jailing backend present (pool, bwrap,
nsjail, docker).

The allowlist root must hide every host file outside the grants (whatever the directory, whatever
the spelling of the path), hold nothing but the allowlist, refuse writes outside the scratch
space, and expose a grant exactly as granted. (Host IPC: ``test_least_privilege_ipc.py``;
quotas and daemons: ``test_least_privilege_limits.py``.)
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import uuid
from pathlib import Path

import pytest

from sandbox import Status
from sandbox._root import DEVICES
from tests.sandbox.jails import CHECKOUT, QUICK, jail_backend


def _needs_root_policy(jail) -> None:
    if not hasattr(jail, "root"):
        pytest.skip(f"{jail.name}: the container image is the root, not an allowlist of the host's")


#: Host directories a secret is planted in: configuration, data, homes, the checkout, /tmp, ...
SECRET_DIRS = ("/etc", "/opt", "/srv", "/var/lib", "/var/tmp", "/home", "/root", "/tmp", "/mnt", "/usr/local",
               "/usr/share", "/run", str(CHECKOUT))  # fmt: skip


@pytest.fixture(scope="module")
def host_secrets():
    """A fresh directory with a secret file in each of :data:`SECRET_DIRS` (removed after)."""
    secret = f"coa-secret-{uuid.uuid4().hex}"
    made = []
    for parent in SECRET_DIRS:
        if not os.path.isdir(parent):
            continue
        directory = Path(parent) / f"coa-test-{uuid.uuid4().hex[:8]}"
        directory.mkdir(mode=0o755)
        (directory / "secret.txt").write_text(secret)
        (directory / "secret.txt").chmod(0o644)
        made.append(directory)
    yield secret, [str(d / "secret.txt") for d in made]
    for directory in made:
        shutil.rmtree(directory, ignore_errors=True)


READ_EVERY_WAY = r"""
import json, os
secret_paths = json.loads(PATHS)
found = {}
for path in secret_paths + ["/etc/passwd", "/etc/shadow", "/etc/hostname", "/root/.bashrc"]:
    spellings = [path, "/proc/self/root" + path, "/proc/1/root" + path, "/tmp/../.." + path,
                 "/proc/self/cwd/../../.." + path]
    link = "link-" + str(abs(hash(path)))
    try:
        os.symlink(path, link)
        spellings.append(link)
    except OSError:
        pass
    for spelling in spellings:
        try:
            with open(spelling, "rb") as handle:
                found[spelling] = handle.read(200).decode(errors="replace")
        except OSError:
            pass
found["environ"] = open("/proc/self/environ").read()
print(json.dumps(found))
"""


def test_host_files_outside_the_root_cannot_be_read_by_any_path(jail, host_secrets):
    secret, paths = host_secrets
    result = jail.run(READ_EVERY_WAY.replace("PATHS", repr(json.dumps(paths))), limits=QUICK)
    assert result.status is Status.OK, result
    found = json.loads(result.stdout)
    assert secret not in result.stdout
    environ = found.pop("environ")
    if hasattr(jail, "root"):  # (a container has its image's /etc: not the host's, but there)
        assert found == {}  # /etc/passwd and friends do not exist in the jail either
    assert "HOME=/tmp/work" in environ and "COA_" not in environ


WALK_ROOT = r"""
import json, os
allowed = json.loads(ALLOWED)
extra = []
def walk(path):
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if any(full == a or full.startswith(a.rstrip("/") + "/") for a in allowed):
            continue
        if os.path.isdir(full) and not os.path.islink(full) and any(a.startswith(full + "/") for a in allowed):
            walk(full)  # a parent of kept paths: nothing else may be in it
            continue
        extra.append(full)
walk("/")
print(json.dumps({"extra": extra, "dev": sorted(os.listdir("/dev")), "etc": sorted(os.listdir("/etc"))}))
"""


def test_the_root_holds_the_allowlist_and_nothing_else(jail):
    _needs_root_policy(jail)
    root = jail.root
    allowed = [*root.read_only, *root.writable, *(path for path, _ in root.symlinks), "/proc", "/dev", "/tmp"]
    result = jail.run(WALK_ROOT.replace("ALLOWED", repr(json.dumps(allowed))), limits=QUICK)
    assert result.status is Status.OK, result
    seen = json.loads(result.stdout)
    assert seen["extra"] == []
    assert seen["dev"] == sorted([*DEVICES, "fd", "stdin", "stdout", "stderr", "shm"])
    assert seen["etc"] == sorted(os.path.basename(p) for p in root.read_only if os.path.dirname(p) == "/etc")


def test_writes_outside_the_scratch_space_are_refused(jail, write_refused):
    targets = [CHECKOUT / f"escape-{uuid.uuid4().hex}", Path("/etc") / f"escape-{uuid.uuid4().hex}"]
    for target in targets:
        write_refused(jail.run(f"open({str(target)!r}, 'w').write('pwned')", limits=QUICK))
        assert not target.exists()
    prefix = os.path.realpath(os.path.dirname(os.__file__))  # the interpreter's own files: read-only
    result = jail.run(f"open({prefix + '/os.py'!r}, 'a').write('pwned')", limits=QUICK)
    assert result.status is Status.VIOLATION, result


@pytest.mark.parametrize("kind", ["pool", "bwrap", "nsjail"])
@pytest.mark.parametrize("below_tmp", [True, False], ids=["grant-below-tmp", "grant-elsewhere"])
def test_grants_expose_exactly_what_was_granted(kind, below_tmp, tmp_path):
    base = tmp_path if below_tmp else Path("/srv") / f"coa-test-{uuid.uuid4().hex[:8]}"
    readable, writable, sibling = base / "data", base / "out", base / "private"
    for directory in (readable, writable, sibling):
        directory.mkdir(parents=True)
    (readable / "input.txt").write_text("granted")
    (sibling / "secret.txt").write_text("not granted")
    writable.chmod(0o777)  # runs execute as other uids
    server = socket.socket(socket.AF_UNIX)  # a socket in a granted directory is still no way out
    server.bind(str(writable / "daemon.sock"))
    server.listen()
    server.settimeout(0.3)
    backend = None
    try:
        backend = jail_backend(kind, read_only_paths=[str(readable)], writable_paths=[str(writable)])
        code = (
            "import os, socket\n"
            f"print(open({str(readable / 'input.txt')!r}).read())\n"
            f"open({str(writable / 'result.txt')!r}, 'w').write('written')\n"
            f"print(sorted(os.listdir({str(base)!r})))\n"
            f"for path in [{str(sibling / 'secret.txt')!r}]:\n"
            "    try:\n        print(open(path).read())\n"
            "    except OSError as exc:\n        print(type(exc).__name__)\n"
            "try:\n"
            f"    s = socket.socket(socket.AF_UNIX); s.connect({str(writable / 'daemon.sock')!r}); print('connected')\n"
            "except OSError as exc:\n    print('socket', exc.errno)\n"
        )
        result = backend.run(code, limits=QUICK)
        assert result.status is Status.OK, result
        lines = result.stdout.splitlines()
        assert lines == ["granted", "['data', 'out']", "FileNotFoundError", f"socket {errno.EACCES}"], result
        assert (writable / "result.txt").read_text() == "written"
        refused = backend.run(f"open({str(readable / 'input.txt')!r}, 'a').write('x')", limits=QUICK)
        assert refused.status is Status.VIOLATION, refused
        assert (readable / "input.txt").read_text() == "granted"
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
        if backend is not None:
            backend.close()
        if not below_tmp:
            shutil.rmtree(base, ignore_errors=True)
