"""Running the recipe's stages: skip finished ones, resume interrupted ones, run lanes at once.

A stage writes ``<out>/<stage>/stage.json`` when it starts (status ``running``) and when it
ends (``done``, with its wall time and the machine's load average). A rerun skips a ``done``
stage whose commands are unchanged and whose inputs (the stages it depends on) were not
rerun; a stage whose commands changed starts over in an empty directory; an interrupted one
continues (evals with ``--resume`` keep finished episodes, RL resumes from its newest
checkpoint, SFT starts again). A faster engine or trainer needs no change here.

Commands run as child processes (``python -m coa_cli.main``), each logging to its stage's
``log.txt`` (``log.<lane>.txt`` when lanes run at once); a failure ends the recipe with the
log's tail, never a half report. With ``parallel_lanes`` > 1 the commands of a stage that
play different envs (its lanes) run at the same time: on two cores the SynthHop and the
MiniWeb evals of one stage take the time of the longer instead of the sum, and a loaded
machine's scheduler gives the recipe one share per running process.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from coa_cli.recipe.config import RecipeConfig
from coa_cli.recipe.stages import Stage

__all__ = ["RecipeError", "run_stages"]


class RecipeError(RuntimeError):
    """A stage's command failed; the message names the stage, the command and the log."""


_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()


def _state(directory: Path) -> dict[str, Any]:
    try:
        return json.loads((directory / "stage.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _write_state(directory: Path, state: dict[str, Any]) -> None:
    tmp = directory / "stage.json.tmp"
    tmp.write_text(json.dumps(state, indent=2), encoding="utf-8")
    os.replace(tmp, directory / "stage.json")


def _child_env(config: RecipeConfig) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": str(config.torch_threads), "TOKENIZERS_PARALLELISM": "false",
                "PYTHONUNBUFFERED": "1"})
    return env


def _run(command: list[str], log: Path, env: dict[str, str], stage: str) -> None:
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"\n$ {shlex.join(['coa', *command])}\n")
        handle.flush()
        process = subprocess.Popen([sys.executable, "-m", "coa_cli.main", *command], stdout=handle,
                                   stderr=subprocess.STDOUT, env=env)
        with _children_lock:
            _children.add(process)
        try:
            returncode = process.wait()
        finally:
            with _children_lock:
                _children.discard(process)
    if returncode != 0:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(True)[-25:])
        raise RecipeError(f"stage {stage}: `coa {shlex.join(command)}` exited with "
                          f"{returncode}; last lines of {log}:\n{tail}")


def _stop_children() -> None:
    """Kill every running command (an interrupt or another lane's failure ends the stage)."""
    with _children_lock:
        for process in list(_children):
            if process.poll() is None:
                process.kill()


def _run_stage(stage: Stage, directory: Path, env: dict[str, str], lanes: int) -> None:
    """Every command of ``stage``: its lanes at once (up to ``lanes``), each lane in order."""
    order: dict[str, list[list[str]]] = {}
    keys = stage.lanes if len(stage.lanes) == len(stage.commands) else ("",) * len(stage.commands)
    for key, command in zip(keys, stage.commands, strict=True):
        order.setdefault(key, []).append(command)
    if lanes <= 1 or len(order) == 1:
        for command in stage.commands:
            _run(command, directory / "log.txt", env, stage.name)
        return

    def lane(key: str, commands: list[list[str]]) -> None:
        for command in commands:
            _run(command, directory / f"log.{key}.txt", env, stage.name)

    pool = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix=f"recipe-{stage.name}")
    futures = [pool.submit(lane, key, commands) for key, commands in order.items()]
    try:
        for future in futures:
            future.result()
    except BaseException:
        _stop_children()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_stages(config: RecipeConfig, out: Path, stages: list[Stage], *, force: tuple[str, ...] = (),
               after_stage: Callable[[], None] | None = None, echo: Callable[[str], None] = print) -> None:
    """Run what is not done yet (see the module docstring); ``after_stage`` e.g. rewrites the report."""
    rerun: set[str] = set()
    env = _child_env(config)
    for stage in stages:
        directory = out / stage.name
        state = _state(directory)
        fresh = (state.get("fingerprint") == stage.fingerprint and stage.name not in force
                 and not rerun & set(stage.depends))
        if fresh and state.get("status") == "done":
            echo(f"[recipe] {stage.name}: done earlier ({state.get('wall_s', 0):.0f} s), reused")
            continue
        if directory.exists() and not (fresh and stage.resumable):
            shutil.rmtree(directory)  # other commands, new inputs, or a stage that cannot resume
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in stage.files.items():
            (directory / name).write_text(text, encoding="utf-8")
        earlier = float(state.get("wall_s", 0.0)) if fresh else 0.0  # time spent before an interrupt
        started = time.time()
        load_start = os.getloadavg()[0]
        _write_state(directory, {"status": "running", "fingerprint": stage.fingerprint,
                                 "commands": stage.shell(), "wall_s": earlier, "started": started})
        lanes = len(set(stage.lanes)) if config.parallel_lanes > 1 and len(stage.lanes) == len(stage.commands) else 1
        logs = directory / ("log.<lane>.txt" if lanes > 1 else "log.txt")
        echo(f"[recipe] {stage.name}: running {len(stage.commands)} command(s) in {lanes} lane(s); log {logs}")
        try:
            _run_stage(stage, directory, env, config.parallel_lanes)
        finally:
            elapsed = earlier + time.time() - started
            _write_state(directory, {"status": "running", "fingerprint": stage.fingerprint,
                                     "commands": stage.shell(), "wall_s": elapsed, "started": started})
        _write_state(directory, {
            "status": "done", "fingerprint": stage.fingerprint, "commands": stage.shell(),
            "wall_s": elapsed, "started": started, "finished": time.time(),
            "load_average": {"start": load_start, "end": os.getloadavg()[0]}, "cpus": os.cpu_count()})
        echo(f"[recipe] {stage.name}: done in {elapsed:.0f} s")
        rerun.add(stage.name)
        if after_stage is not None:
            after_stage()
