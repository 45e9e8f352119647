"""The sandbox API as callers use it: results, limits, concurrency, crash recovery, backends."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import sandbox
from sandbox import ExecResult, Limits, Status
from sandbox.backends import BACKENDS, BackendUnavailable, get_backend


def test_stdin_stdout_and_exit_codes(pool):
    echo = pool.run("import sys\nprint(sys.stdin.read().upper(), end='')", stdin="abc\ndef\n")
    assert (echo.status, echo.stdout, echo.exit_code) == (Status.OK, "ABC\nDEF\n", 0)
    exited = pool.run("import sys\nprint('partial')\nsys.exit(3)")
    assert (exited.status, exited.exit_code, exited.stdout) == (Status.ERROR, 3, "partial\n")
    crashed = pool.run("def f(:\n  pass")
    assert crashed.status is Status.ERROR and "SyntaxError" in crashed.stderr
    assert "_harness" not in crashed.stderr  # the traceback is the code's, not ours


def test_preloaded_numpy_and_fresh_main_module(pool):
    result = pool.run("import numpy as np\nprint(__name__, np.linalg.det(np.eye(3)))")
    assert result.stdout == "__main__ 1.0\n"
    leftover = pool.run("print('np' in globals())")
    assert leftover.stdout == "False\n"  # every run starts from an empty namespace


def test_output_is_cut_with_a_marker(pool):
    result = pool.run("print('y' * 5000)", limits=Limits(max_output_chars=100))
    assert result.truncated and result.status is Status.OK
    assert result.stdout.startswith("y" * 100) and "truncated at 100 characters" in result.stdout


def test_each_run_gets_its_own_empty_workdir(pool):
    first = pool.run("import os\nopen('f.txt', 'w').write('x')\nprint(os.getcwd(), os.listdir('.'))")
    second = pool.run("import os\nprint(os.listdir('.'))")
    assert first.stdout.endswith("['f.txt']\n") and second.stdout == "[]\n"


def test_many_concurrent_callers_get_exactly_their_own_answer(pool):
    def call(i: int) -> tuple[int, ExecResult]:
        return i, pool.run(f"print({i} * 3)")

    with ThreadPoolExecutor(32) as executor:
        results = list(executor.map(call, range(200)))
    assert [r.stdout for _, r in results] == [f"{i * 3}\n" for i in range(200)]
    assert all(r.status is Status.OK for _, r in results)


def test_async_run_is_concurrent():
    async def main() -> list[ExecResult]:
        return await asyncio.gather(*(sandbox.arun(f"print({i})") for i in range(20)))

    results = asyncio.run(main())
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]


def test_killed_worker_is_replaced_and_the_run_still_answers(fresh_pool):
    (victim,) = fresh_pool.worker_pids()
    os.kill(victim, signal.SIGKILL)
    result = fresh_pool.run("print('still here')")
    assert result.stdout == "still here\n"
    assert fresh_pool.worker_pids() != [victim]


def test_run_that_kills_its_worker_twice_is_a_violation(fresh_pool, monkeypatch):
    # Simulate a run that takes its worker down: the worker dies while answering.
    from sandbox._workerproc import WorkerLost, WorkerProcess

    def always_lost(self, request, timeout_s):
        raise WorkerLost("worker died")

    monkeypatch.setattr(WorkerProcess, "call", always_lost)
    result = fresh_pool.run("print(1)")
    assert result.status is Status.VIOLATION and "two workers" in result.stderr


def test_pool_reports_its_isolation_layers(pool):
    layers = " ".join(pool.isolation)
    for layer in ("network namespace", "mount namespace", "pid namespace", "read-only", "rlimits", "wall-clock"):
        assert layer in layers


def test_subprocess_backend_runs_and_is_logged_as_unisolated(caplog):
    logging.getLogger("sandbox.backends.subprocess_backend").disabled = False  # other tests' configs
    with caplog.at_level(logging.WARNING):
        backend = get_backend("subprocess")
    assert any("unisolated" in record.getMessage() for record in caplog.records)
    assert backend.isolation[0].startswith("NO ISOLATION")
    ok = backend.run("print(input()[::-1])", stdin="abc")
    assert (ok.status, ok.stdout) == (Status.OK, "cba\n")
    slow = backend.run("import time\ntime.sleep(30)", limits=Limits(wall_s=0.5))
    assert slow.status is Status.TIMEOUT
    spin = backend.run("while True:\n    pass", limits=Limits(cpu_s=1, wall_s=10))
    assert spin.status is Status.TIMEOUT
    big = backend.run("x = bytearray(2 * 2**30)", limits=Limits(memory_mb=256))
    assert big.status is Status.MEMORY


def test_auto_never_falls_back_to_the_unisolated_backend(monkeypatch):
    from sandbox import backends

    def refuse(name, **options):
        if name in backends.AUTO_ORDER:
            raise BackendUnavailable(f"{name} cannot start here")
        return original(name, **options)

    original = backends.get_backend
    monkeypatch.setattr(backends, "get_backend", refuse)
    with pytest.raises(BackendUnavailable) as caught:
        original("auto")
    message = str(caught.value)
    assert "pool cannot start here" in message and "nsjail cannot start here" in message
    assert "COA_SANDBOX_BACKEND=subprocess" in message  # how to opt in, explicitly


def test_unisolated_default_is_warned_about(monkeypatch):
    from sandbox import backends

    monkeypatch.setattr(backends, "_default", None)
    monkeypatch.setenv("COA_SANDBOX_BACKEND", "subprocess")
    assert "unisolated" in sandbox.unisolated_warning()
    monkeypatch.setenv("COA_SANDBOX_BACKEND", "pool")
    assert sandbox.unisolated_warning() is None


def test_a_limit_the_backend_cannot_honour_is_refused_not_dropped(pool):
    with pytest.raises(sandbox.UnsupportedLimits, match="network=True"):
        pool.run("print(1)", limits=Limits(network=True))
    with pytest.raises(sandbox.UnsupportedLimits, match="network=True"):
        sandbox.Session(Limits(network=True))
    assert pool.run("print(1)").stdout == "1\n"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cpu_s": 0}, "cpu_s must be a number >= 0.01"),
        ({"memory_mb": "lots"}, "memory_mb"),
        ({"max_files": 0}, "max_files"),
        ({"disk_mb": -1}, "disk_mb"),
        ({"network": "yes"}, "network must be true or false"),
        # NaN passed the checks, and infinity, 1e300 and fractional counts (failures inside runs)
        ({"wall_s": float("nan")}, "wall_s must be a number >= 0.01"),
        ({"cpu_s": float("inf")}, "cpu_s must be at most 1000000"),
        ({"wall_s": 1e300}, "wall_s must be at most"),
        ({"memory_mb": 512.5}, "memory_mb must be a whole number"),
        ({"max_processes": float("nan")}, "max_processes must be a number >= 1"),
    ],
)
def test_impossible_limits_are_a_clear_error(changes, message):
    with pytest.raises(ValueError, match=message):
        Limits(**changes)


def test_a_whole_number_given_as_a_float_is_that_number(pool):
    """A config's ``memory_mb: 512.0`` was accepted and then failed inside every run: ``error``,
    "sandbox setup failed: TypeError(...)" (the rlimit and the cgroup file wanted an integer)."""
    limits = Limits(memory_mb=512.0, max_processes=8.0, disk_mb=64.0)
    assert (limits.memory_mb, limits.max_processes, limits.disk_mb) == (512, 8, 64)
    assert type(limits.memory_mb) is int
    result = pool.run("print(1)", limits=limits)
    assert (result.status, result.stdout) == (Status.OK, "1\n"), result


def test_unknown_backend_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        get_backend("chroot-jail")
    assert {"pool", "subprocess", "bwrap", "nsjail", "docker"} <= set(BACKENDS)


def test_backend_is_chosen_by_environment_variable():
    code = "import sandbox; print(sandbox.default_backend().name, sandbox.run('print(7)').stdout.strip())"
    env = {**os.environ, "COA_SANDBOX_BACKEND": "subprocess"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["subprocess", "7"]


def test_configure_replaces_the_default_in_a_fresh_process():
    code = (
        "import sandbox\n"
        "first = sandbox.configure('subprocess')\n"
        "assert sandbox.default_backend() is first\n"
        "print(sandbox.run('print(1+1)').stdout.strip())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "2", out.stderr


def test_wall_time_is_measured_not_guessed(pool):
    started = time.monotonic()
    result = pool.run("import time\ntime.sleep(0.3)")
    assert 0.3 <= result.wall_s <= time.monotonic() - started


def test_forked_child_gets_its_own_pool_and_leaves_the_parents_alone(pool):
    before = pool.worker_pids()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - child process
        try:
            result = sandbox.run("print('from child')")
            own = sandbox.default_backend() is not pool
            os.write(write_end, f"{result.stdout.strip()}|{own}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(child, 0)
    reply = os.read(read_end, 100).decode()
    os.close(read_end)
    assert reply == "from child|True"
    assert pool.worker_pids() == before
    assert pool.run("print('parent ok')").stdout == "parent ok\n"


def test_preloaded_modules_are_already_imported_when_a_run_starts(pool):
    probe = "import sys\nprint('numpy' in sys.modules, 'collections' in sys.modules)"
    assert pool.run(probe).stdout == "True True\n"  # paid once per worker, not per run


def test_preload_list_and_pool_size_are_configuration():
    try:
        backend = get_backend("pool", size=1, preload=("xml.dom.minidom",))
    except sandbox.BackendUnavailable as exc:
        pytest.skip(f"pool backend unavailable: {exc}")
    try:
        result = backend.run("import sys\nprint('xml.dom.minidom' in sys.modules, 'numpy' in sys.modules)")
        assert result.stdout == "True False\n"
        assert backend.size == 1 and len(backend.worker_pids()) == 1
    finally:
        backend.close()


def test_pool_configuration_from_environment(monkeypatch):
    from sandbox.backends.pool import DEFAULT_PRELOAD, configured_preload, configured_size

    monkeypatch.setenv("COA_SANDBOX_POOL_SIZE", "3")
    monkeypatch.setenv("COA_SANDBOX_PRELOAD", "+sympy, scipy")
    assert configured_size() == 3
    assert configured_preload() == (*DEFAULT_PRELOAD, "sympy", "scipy")
    monkeypatch.setenv("COA_SANDBOX_PRELOAD", "math")
    assert configured_preload() == ("math",)
    monkeypatch.setenv("COA_SANDBOX_POOL_SIZE", "0")
    with pytest.raises(ValueError, match="COA_SANDBOX_POOL_SIZE"):
        configured_size()


def test_killing_workers_under_load_loses_and_duplicates_no_answer():
    try:
        backend = get_backend("pool", size=2, preload=())
    except sandbox.BackendUnavailable as exc:
        pytest.skip(f"pool backend unavailable: {exc}")
    killed: list[int] = []

    def call(i: int) -> ExecResult:
        return backend.run(f"import time\ntime.sleep(0.02)\nprint({i})", limits=Limits(wall_s=10))

    try:
        with ThreadPoolExecutor(6) as executor:
            futures = [executor.submit(call, i) for i in range(80)]
            for _ in range(2):
                victim = backend.worker_pids()[0]
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)
                deadline = time.monotonic() + 30  # the next kill only once the victim is replaced
                while victim in backend.worker_pids() or len(backend.worker_pids()) < 2:
                    assert time.monotonic() < deadline, "killed worker was not replaced"
                    time.sleep(0.05)
            results = [f.result() for f in futures]
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(80)]
        assert all(r.status is Status.OK for r in results)
        assert not set(killed) & set(backend.worker_pids())
    finally:
        backend.close()


def test_file_size_open_files_and_workdir_space_are_limited(pool):
    big_file = pool.run("open('big', 'wb').write(b'x' * (3 * 2**20))", limits=Limits(max_file_mb=1))
    assert big_file.status is Status.OUTPUT_LIMIT and "File too large" in big_file.stderr, big_file
    assert "sandbox: file size limit reached: 1 MB per file (Limits.max_file_mb)" in big_file.stderr
    many = pool.run("handles = [open('f%d' % i, 'w') for i in range(200)]", limits=Limits(max_open_files=32))
    assert many.status is Status.ERROR and "Too many open files" in many.stderr, many
    code = "chunk = b'x' * 2**20\nwith open('fill', 'wb') as f:\n    for _ in range(100):\n        f.write(chunk)"
    full = pool.run(code, limits=Limits(max_file_mb=512))  # the scratch space is a 64 MB tmpfs
    assert full.status is Status.OUTPUT_LIMIT and "No space left on device" in full.stderr, full
    assert "sandbox: disk quota used up: 64 MB" in full.stderr


def test_quotas_are_per_run_and_a_change_is_honoured_at_once(fresh_pool):
    # The next child is mounted with the last request's quotas; another request's are honoured
    # by a child prepared for them, and the old ones come back when asked for again.
    flood = "n = 0\nwhile True:\n    open(f'f{n}', 'w').close()\n    n += 1"
    for max_files in (40, 40, 90, 40):
        result = fresh_pool.run(flood, limits=Limits(max_files=max_files))
        assert result.status is Status.OUTPUT_LIMIT and f"{max_files} files" in result.stderr, result
        assert f"f{max_files - 1}" not in result.stderr and f"f{max_files}'" in result.stderr
    small = fresh_pool.run("import os\nst = os.statvfs('.')\nprint(st.f_blocks * st.f_frsize)",
                           limits=Limits(disk_mb=3))
    assert int(small.stdout) == 3 * 2**20


def test_worker_keeps_a_tag_written_right_after_the_start_line():
    # A fast run can tag itself (V: denied) before the worker reads its start line; both then
    # arrive in one read. The tag must be kept, and the worker must not take it for a hang-up.
    import json
    from types import SimpleNamespace

    from sandbox._worker import Worker

    status_r, status_w = os.pipe()
    idle_r, idle_w = os.pipe()
    try:
        os.write(status_w, b"S" + json.dumps({"id": 7, "limits": {}}).encode() + b"\nV")
        os.close(status_w)  # the run is over: a reader waiting for more would see the end
        status_w = os.open(os.devnull, os.O_RDONLY)  # (keeps the cleanup below simple)
        child = SimpleNamespace(status_r=status_r, pidfd=idle_r)
        assert Worker._await_start(None, child) == (b"S", {"id": 7, "limits": {}}, b"V")
    finally:
        for fd in (status_r, status_w, idle_r, idle_w):
            os.close(fd)


def test_denied_runs_back_to_back_never_cost_a_worker(fresh_pool):  # /etc holds only ld.so.cache, read-only
    (worker,) = fresh_pool.worker_pids()
    for _ in range(30):
        result = fresh_pool.run("open('/etc/passwd', 'a')", limits=Limits(wall_s=5))
        assert result.status is Status.VIOLATION, result
    assert fresh_pool.worker_pids() == [worker]


UNSENDABLE = {
    "lone-surrogate-code": ("print('\ud800')", None),  # a JSON "\ud800" escape in a tool call gives one
    "lone-surrogate-stdin": ("print(input())", "\udcff"),
    "bytes-code": (b"print(1)", None),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", list(UNSENDABLE))
def test_text_no_run_can_receive_is_a_clear_error_and_costs_no_worker(fresh_pool, kind):
    """Such a request failed to encode inside the pool's call to a worker it had already taken,
    and the worker never came back: the next run of a one-worker pool waited forever (a default
    pool, after as many such calls as it has workers)."""
    code, stdin = UNSENDABLE[kind]
    for _ in range(2):
        with pytest.raises((ValueError, TypeError), match=r"sandbox (code|stdin)"):
            fresh_pool.run(code, stdin=stdin, limits=Limits(wall_s=5))
    waiter = ThreadPoolExecutor(1)
    try:
        after = waiter.submit(fresh_pool.run, "print(6 * 7)", limits=Limits(wall_s=5)).result(timeout=60)
    finally:
        waiter.shutdown(wait=False)  # (a run still waiting for a worker ends when the pool closes)
    assert (after.status, after.stdout) == (Status.OK, "42\n"), after


@pytest.mark.parametrize("kind", list(UNSENDABLE))
def test_every_backend_refuses_unsendable_text_the_same_way(jail, kind):
    code, stdin = UNSENDABLE[kind]
    with pytest.raises((ValueError, TypeError), match=r"sandbox (code|stdin)"):
        jail.run(code, stdin=stdin, limits=Limits(wall_s=5))
    assert jail.run("print(6 * 7)", limits=Limits(wall_s=10)).stdout == "42\n"
