"""The pool started by an unprivileged user: the jail is built inside a user namespace.

The other tests run as root, where runs switch to per-slot uids. A user without privileges
takes the other path (user namespace mapped to itself, no capabilities), so this test
starts a pool as uid 65534 with the system interpreter (the pyenv one under ``/root`` is
unreadable to that uid) and replays the main attacks. Skipped with the reason when the
machine cannot run a process as another user.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
NOBODY = 65534

PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import sandbox
from sandbox import Limits

target, host_tmp = sys.argv[2], sys.argv[3]
import socket
host_sock = host_tmp + ".sock"  # a listening Unix socket of the host, in a directory runs cannot see
listener = socket.socket(socket.AF_UNIX)
listener.bind(host_sock)
listener.listen()
listener.setblocking(False)
# More processes of this uid than a run may start: RLIMIT_NPROC counts them all, so the
# pool must budget runs on top of them or every thread a run starts would be refused.
import subprocess
sleepers = [subprocess.Popen(["sleep", "120"]) for _ in range(24)]
try:  # no cgroup for this uid: per-run limits cannot be had, and the pool says so
    sandbox.get_backend("pool", size=1, preload=()).close()
    refused = ""
except sandbox.BackendUnavailable as exc:
    refused = str(exc)
backend = sandbox.get_backend("pool", size=1, preload=(), accounting="process")  # the explicit opt-in
quick = Limits(cpu_s=2, wall_s=3, max_processes=16, memory_mb=256, max_files=100)
attacks = {
    "hello": "import os\nprint(input(), os.getcwd())",
    "tcp": "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)",
    "dns": "import socket\nsocket.getaddrinfo('example.com', 80)",
    "checkout": f"open({target!r}, 'w').write('pwned')",
    "host_tmp": f"open({host_tmp!r}, 'w').write('pwned')",
    "fork_bomb": "import os\nwhile True:\n    os.fork()",
    "memory": "b = []\nwhile True:\n    b.append(bytearray(50 * 2**20))",
    "cpu": "while True:\n    pass",
    "sleep": "import time\ntime.sleep(1e9)",
    "environ": "import os\nprint(sorted(os.environ))",
    "root": "import os\nprint(sorted(os.listdir('/')), os.path.exists('/etc/passwd'))",
    "unix_socket": f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({host_sock!r})\nprint('connected')",
    "inodes": "n = 0\nwhile True:\n    open(f'f{n}', 'w').close()\n    n += 1",
    "thread": "import threading\nt = threading.Thread(target=print, args=('thread ok',))\nt.start()\nt.join()",
    "after": "print(6 * 7)",
}
report = {"isolation": list(backend.isolation), "refused_without_opt_in": refused}
for name, code in attacks.items():
    result = backend.run(code, stdin="hi", limits=quick)
    report[name] = [str(result.status), result.stdout]
backend.close()
thread = attacks["thread"]
r = sandbox.get_backend("subprocess").run(thread, limits=quick)
report["subprocess_thread"] = [str(r.status), r.stdout]
with sandbox.Session(quick, jail=False, preload=(), accounting="process") as session:
    r = session.run(thread)
    report["unjailed_session_thread"] = [str(r.status), r.stdout]
for sleeper in sleepers:
    sleeper.kill()
try:
    listener.accept()
    report["socket_reached"] = True
except BlockingIOError:
    report["socket_reached"] = False
listener.close()
import os
os.unlink(host_sock)
print(json.dumps(report))
"""


def _unjailed_scratch_left(settle_s: float = 5.0) -> list[str]:
    """Host directories of the unjailed session (uid 65534) still there after ``settle_s``: its
    workers remove them when their caller is gone, a spare still starting at exit included."""
    import time

    deadline = time.monotonic() + settle_s
    while True:
        left = [str(p) for p in Path("/tmp").glob("coa-sandbox-*") if p.stat().st_uid == NOBODY]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _readable_by_others(path: Path) -> bool:
    for part in [path, *path.parents]:
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH or (part == path and not mode & stat.S_IROTH):
            return False
    return True


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as uid 65534")
    setpriv = shutil.which("setpriv")
    if setpriv is None or not os.path.exists(SYSTEM_PYTHON):
        pytest.skip("needs setpriv (util-linux) and /usr/bin/python3")
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info >= (3, 11))"],
                             capture_output=True, text=True)  # fmt: skip
    if version.stdout.strip() != "True":
        pytest.skip("/usr/bin/python3 is older than 3.11")
    if not _readable_by_others(CHECKOUT / "sandbox"):
        pytest.skip(f"uid {NOBODY} cannot read the checkout at {CHECKOUT}")
    target = CHECKOUT / f"nobody-escape-{uuid.uuid4().hex}"
    host_tmp = Path("/tmp") / f"nobody-escape-{uuid.uuid4().hex}"
    secret = f"coa-secret-{uuid.uuid4().hex}"
    argv = [setpriv, "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", SYSTEM_PYTHON, "-I", "-c"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "COA_TEST_SECRET": secret}
    out = subprocess.run(
        [*argv, PROBE, str(CHECKOUT), str(target), str(host_tmp)],
        capture_output=True, text=True, timeout=180, env=env, cwd="/tmp",
    )  # fmt: skip
    if "cannot jail runs" in out.stderr or "unshare" in out.stderr:
        pytest.skip(f"the kernel refuses user namespaces to uid {NOBODY}: {out.stderr.strip()[-300:]}")
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    data["_files"] = [target.exists(), host_tmp.exists()]
    data["_scratch_dirs"] = _unjailed_scratch_left()
    data["_secret"] = secret
    for leftover in (target, host_tmp):
        leftover.unlink(missing_ok=True)
    return data


def test_unprivileged_pool_jails_runs_in_a_user_namespace(report):
    assert "user namespace" in report["isolation"]
    assert "network namespace (no interfaces)" in report["isolation"]
    assert report["hello"] == ["ok", "hi /tmp/work\n"]
    assert report["after"] == ["ok", "42\n"]
    # The uid's 24 other processes do not eat a run's 16-process budget, jailed or not.
    assert report["thread"] == ["ok", "thread ok\n"]
    assert report["subprocess_thread"] == ["ok", "thread ok\n"]
    assert report["unjailed_session_thread"] == ["ok", "thread ok\n"]


@pytest.mark.parametrize(
    ("attack", "expected"),
    [
        ("tcp", "violation"),
        ("dns", "violation"),
        ("checkout", "error"),  # not in the allowlist root at all: a missing path
        ("fork_bomb", "violation"),
        ("memory", "memory"),
        ("cpu", "timeout"),
        ("sleep", "timeout"),
        ("unix_socket", "not ok"),  # refused by seccomp, or (no pyseccomp) absent from the root
        ("inodes", "output_limit"),
    ],
)
def test_unprivileged_pool_refuses_attacks(report, attack, expected):
    if expected == "not ok":
        assert report[attack][0] in ("violation", "error") and report[attack][1] == "", report[attack]
        assert report["socket_reached"] is False
        return
    assert report[attack][0] == expected, report[attack]


def test_unprivileged_runs_see_only_the_allowlist_root(report):
    assert report["root"][0] == "ok"
    assert "'home'" not in report["root"][1] and report["root"][1].endswith("False\n")


def test_unprivileged_runs_leave_the_host_untouched(report):
    # /tmp inside a run is a private tmpfs: the write may succeed there, never on the host.
    assert report["_files"] == [False, False]
    assert report["_scratch_dirs"] == []  # the unjailed session's host directories are gone
    assert report["_secret"] not in report["environ"][1] and "COA_TEST_SECRET" not in report["environ"][1]


def test_without_a_cgroup_the_per_process_mode_takes_an_explicit_opt_in(report):
    refused = report["refused_without_opt_in"]
    if not refused:
        pytest.skip(f"uid {NOBODY} can make cgroups here: nothing to refuse")
    assert "accounting='process'" in refused and "COA_SANDBOX_ACCOUNTING=process" in refused
    assert any("per-process limits" in layer for layer in report["isolation"])
