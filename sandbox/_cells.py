"""A session worker's cells: one jailed child kept between cells, and what holds it in check.

A cell shares its process with the harness, so nothing the child writes is trusted: the
"cell finished" record is fixed-size and must carry the nonce of the cell's request (a cell
cannot know a later cell's), so a forged one can neither grow the worker nor stand for another
cell. The cell's CPU budget is watched from here (the session's cgroup, all of its processes
and threads together), whatever signals the code ignores. Between cells the session's cgroup is
frozen: processes and threads a cell left running keep their state but use no CPU until the next
cell, whose budget they then share. In the per-process mode (no cgroup) the CPU watch is the
session process's own and leftover processes are killed after each cell (threads run on).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import time
from typing import TYPE_CHECKING, Any

from sandbox._cgroup import RunUsage
from sandbox._child import CELL_DONE
from sandbox._collect import CpuWatch, RunEnd, hard_output_cap, timed_outcome
from sandbox._lockdown import exit_code_of_init
from sandbox._wire import FrameError, read_exact, read_frame, write_frame
from sandbox._zygote import tree_cpu_s
from sandbox.types import Limits

if TYPE_CHECKING:
    from sandbox._worker import Worker
    from sandbox._zygote import Prepared

__all__ = ["serve_session"]

_DONE_GRACE_S = 1.0  # for the cell's record after its output is complete (past the wall limit)
_MAX_FORGED_RECORDS = 64


def _read_done(fd: int, nonce: bytes, deadline: float, watch: CpuWatch) -> tuple[int, float] | None:
    """The cell's own record (exit code, CPU s): one fixed-size record at a time, skipping
    records with another nonce (a forgery: the cell's own record comes when its code is done);
    None when the pipe holds anything else, nothing comes by ``deadline``, or the cell spends its
    CPU budget meanwhile."""
    for _ in range(_MAX_FORGED_RECORDS):
        while not select.select([fd], [], [], 0.05)[0]:
            if time.monotonic() >= deadline or watch.used() >= watch.budget:
                return None
        try:
            marker, got, rc, cpu_s = CELL_DONE.unpack(read_exact(fd, CELL_DONE.size, deadline))
        except (FrameError, OSError):
            return None
        if marker != b"C":
            return None
        if got == nonce and math.isfinite(cpu_s) and 0.0 <= cpu_s <= 1e6:
            return rc & 0xFF, cpu_s
    return None


def _drain(fd: int, into: bytearray, cap: int) -> bool:
    """What ``fd`` holds now (the cell's output written after a forged record), up to ``cap``; False
    when it holds more (processes the cell left running flood it: it was read for as long as they
    kept it full, the worker's own CPU and the session's call spent on it)."""
    while select.select([fd], [], [], 0)[0]:
        if len(into) >= cap:
            return False
        try:
            data = os.read(fd, 1 << 16)
        except OSError:
            return True
        if not data:
            return True
        into += data[: max(0, cap - len(into))]
    return True


def _since(now: RunUsage, then: RunUsage) -> RunUsage:
    return RunUsage(now.cpu_s - then.cpu_s, now.oom_kills - then.oom_kills,
                    now.process_limit_hits - then.process_limit_hits, now.memory_peak)  # fmt: skip


def _watch(child: Prepared) -> CpuWatch:
    """The CPU the child's processes used since the last cell ended, as a budget check."""
    if child.cgroup is not None:
        cgroup, mark = child.cgroup, child.cpu_mark
        return CpuWatch(lambda: cgroup.cpu_s() - mark, math.inf)
    # The init's and the cells' process's (and what they reaped); at a kill, the figure before it
    # (what the kernel reaps with the namespace is in no rusage).
    mark = tree_cpu_s(child.pid)
    return CpuWatch(lambda: max(tree_cpu_s(child.pid), child.cpu_at_kill) - mark, math.inf)


def run_cell(worker: Worker, request: dict[str, Any]) -> dict[str, Any]:
    """One cell of a session: state persists in ``worker.current`` until it dies."""
    limits = Limits(**request["limits"])
    restarted, worker.lost_state = worker.lost_state, False
    child = worker.current = worker.current or worker.take_prepared()
    cgroup = child.cgroup
    if cgroup is not None:
        if child.counted is None:  # the child's first cell: its set-up is not the cell's
            child.counted = cgroup.usage()
            child.cpu_mark = child.counted.cpu_s
        cgroup.thaw()
    nonce = os.urandom(16)
    watch = _watch(child)
    # The cell's budget, and no more than what the session has left: all its cells together, those
    # of interpreters it lost included (a cell that ended its interpreter got a fresh budget).
    session_left = float(request.get("session_cpu_s", math.inf)) - worker.session_cpu_spent
    watch.budget = max(0.0, min(limits.cpu_s, session_left))
    started = time.monotonic()
    with contextlib.suppress(BrokenPipeError):
        write_frame(child.req_w, {**request, "nonce": nonce.hex(), "kill_leftovers": cgroup is None})
    collected = worker.collect_from(child, child.done_r, started, limits, cpu_watch=watch)
    done = None
    killed = (collected.wall_killed and not collected.ended_late) or collected.output_killed or collected.cpu_killed
    if not killed:  # its own record is due (a cell that merely ended late keeps the session's state)
        deadline = max(started + limits.wall_s, time.monotonic() + _DONE_GRACE_S)
        done = _read_done(child.done_r, nonce, deadline, watch)
        # A forged record ended the watch early and the cell's own came past its wall limit: it
        # ran past the limit all the same (it read ok, up to the second of grace later).
        collected.wall_killed |= done is not None and time.monotonic() >= started + limits.wall_s
        outputs = {child.out_r: bytearray(collected.stdout), child.err_r: bytearray(collected.stderr)}
        for fd, kept in outputs.items():
            collected.output_killed |= not _drain(fd, kept, hard_output_cap(limits))
        collected.stdout, collected.stderr = bytes(outputs[child.out_r]), bytes(outputs[child.err_r])
    usage = _since(cgroup.usage(), child.counted) if cgroup is not None and child.counted else None
    if done is None and not killed:  # its init passes on how the cells' process ended as it exits
        select.select([child.pidfd], [], [], _DONE_GRACE_S)
    used = max(0.0, watch.used())
    worker.session_cpu_spent += used  # before a dead child's figures are gone
    if done is None:  # the cell killed the session (or we did): report how it died
        # No record of its own by its wall limit (none came, or none that held): killed for it now.
        collected.wall_killed |= not killed and time.monotonic() >= started + limits.wall_s
        wait_status, _ = worker.discard(child)
        worker.current, worker.lost_state = None, True
        returncode, cpu_s = exit_code_of_init(os.waitstatus_to_exitcode(wait_status), worker.jail), used
    else:
        returncode, cpu_s = done[0], max(done[1], used)  # the record's figure is the cell's to write
        if cgroup is not None:
            cgroup.freeze()  # what the cell left running waits for the next cell
            child.counted = cgroup.usage()
            child.cpu_mark = child.counted.cpu_s
    response = timed_outcome(RunEnd(collected, returncode, cpu_s, usage), limits, started)
    response["session_restarted"] = restarted
    response["session_alive"] = worker.current is not None
    response["session_cpu_spent"] = worker.session_cpu_spent  # kept by the session if this worker is lost
    return response


def reset(worker: Worker) -> dict[str, Any]:
    if worker.current is not None:
        worker.discard(worker.current)
        worker.current = None
    worker.lost_state = False
    return {"reset": True}


def serve_session(worker: Worker, control_out: int) -> None:
    """The session worker's loop: cells and resets until the session closes the pipe."""
    while True:
        if worker.prepared is None and worker.current is None:
            worker.prepared = worker.prepare()  # between requests, off the caller's clock
        try:
            request = read_frame(worker.control_in)
        except FrameError:
            break
        response = {"id": request.get("id")}
        op = request.get("op")
        try:
            if op == "cell":
                response.update(run_cell(worker, request))
            elif op == "reset":
                response.update(reset(worker))
            else:
                response["internal_error"] = f"operation {op!r} not served by a session worker"
        except Exception as exc:
            response["internal_error"] = f"{type(exc).__name__}: {exc}"
        write_frame(control_out, response)
    for child in (worker.prepared, worker.current):
        if child is not None:
            worker.discard(child)
