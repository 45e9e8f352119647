"""Run many episodes at once and stream them to JSONL: the engine of ``coa eval`` and RL.

Shape: ``concurrency`` worker threads, each owning one env and one agent (envs are not
thread-safe), pull ``(task, sample)`` jobs from a queue. Local engines are wrapped in a
:class:`~agents.engines.batching.BatchingEngine`, so the workers' turns are decoded together
in shared batches; HTTP engines simply have ``concurrency`` requests in flight. Tool calls
run in the worker that made them, so a slow tool stalls only its own episode while the
others keep generating.

Robustness: each agent turn and env step runs against the episode's deadline; a model that
never closes a tag (hits ``max_new_tokens``), returns empty text, makes too many tool calls,
or an engine that errors/times out ends *that* episode with a clear
:class:`~agents.trajectory.EpisodeStatus` (``truncated:…`` / ``error:…``) and the run goes
on. A stuck call is abandoned with its env, and the worker continues on a fresh one. The
episode itself is :func:`agents.episode.run_episode`, the one loop ``coa eval`` and tests
share; this module only schedules it.

Reproducible: episode ``(task i, sample k)`` uses seed ``episode_seed(seed, i, k)`` for the
env reset and for the policy's sampling, whatever the scheduling. Every finished
trajectory is appended and flushed at once; ``resume=True`` skips the pairs already in the
file (a torn last line from a crash is dropped).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import queue
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.base import Agent
from agents.episode import EpisodeRecorder, EpisodeTimeout, run_episode
from agents.trajectory import EpisodeStatus, Trajectory, read_trajectories, write_trajectory

__all__ = [
    "Job",
    "RolloutResult",
    "episode_seed",
    "play_episode",
    "policy_factory",
    "run_rollouts",
]

AgentFactory = Callable[[Any, int], Agent]


def episode_seed(seed: int, task_index: int, sample_index: int) -> int:
    """A stable 31-bit seed per (run seed, task, sample), independent of scheduling."""
    digest = hashlib.blake2b(f"{seed}:{task_index}:{sample_index}".encode(), digest_size=4)
    return int.from_bytes(digest.digest(), "big") & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class Job:
    task_index: int
    sample_index: int
    seed: int


def play_episode(
    env: Any,
    agent: Agent,
    *,
    max_tool_calls: int = 50,
    end_on_length: bool = True,
    **episode_kwargs: Any,
) -> Trajectory:
    """:func:`~agents.episode.run_episode` with the runner's bad-output rules on: at most
    ``max_tool_calls`` tool calls, a turn that hit ``max_new_tokens`` ends the episode
    (``truncated:max_new_tokens``), an empty turn too (``error:empty_output``)."""
    return run_episode(env, agent, max_tool_calls=max_tool_calls, end_on_length=end_on_length,
                       end_on_empty=True, **episode_kwargs)


@dataclass
class RolloutResult:
    trajectories: list[Trajectory] = field(default_factory=list)
    wall_s: float = 0.0
    skipped: int = 0  # already in the output file (resume)

    @property
    def status_counts(self) -> dict[str, int]:
        return dict(Counter(t.status for t in self.trajectories))


# Calls abandoned at an episode's deadline keep running on their daemon threads. One still
# inside native code (a forward pass, a tokenizer) when Python finalizes is killed mid-C++ and
# aborts the process ("terminate called without an active exception") instead of exiting 0;
# so at exit they get a bounded wait to return first.
_ABANDONED: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_ABANDONED_WAIT_S = 60.0


@atexit.register
def _wait_for_abandoned_calls() -> None:
    deadline = time.monotonic() + _ABANDONED_WAIT_S
    for thread in list(_ABANDONED):
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


class _Worker:
    """One env + agent. Each call runs on a daemon thread so a deadline can abandon it."""

    def __init__(self, env_factory: Callable[[], Any], agent_factory: AgentFactory):
        self.env_factory, self.agent_factory = env_factory, agent_factory
        self.env: Any = None

    def run(self, job: Job, timeout_s: float | None, **episode_kwargs: Any) -> Trajectory:
        if self.env is None:
            self.env = self.env_factory()
        env = self.env
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def call(fn: Callable[[], Any]) -> Any:
            if deadline is None:
                return fn()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EpisodeTimeout()
            box: dict[str, Any] = {}
            done = threading.Event()

            def target() -> None:
                try:
                    box["value"] = fn()
                except BaseException as exc:  # handed to the caller below
                    box["error"] = exc
                finally:
                    done.set()

            thread = threading.Thread(target=target, name="coa-episode-call", daemon=True)
            thread.start()
            if not done.wait(remaining):
                _ABANDONED.add(thread)  # still running: waited for (bounded) at interpreter exit
                raise EpisodeTimeout()
            if "error" in box:
                raise box["error"]
            return box["value"]

        try:
            agent = self.agent_factory(env, job.seed)
            trajectory = play_episode(env, agent, seed=job.seed,
                                      options={"task_index": job.task_index},
                                      sample_index=job.sample_index, call=call, **episode_kwargs)
        except Exception as exc:  # reset or agent construction failed: no episode at all
            tasks = env.unwrapped.tasks
            timeout = isinstance(exc, EpisodeTimeout)
            trajectory = EpisodeRecorder.failed_start(
                env.unwrapped.config.env_id, tasks[job.task_index % len(tasks)].task_id,
                EpisodeStatus.ERROR_TIMEOUT if timeout else EpisodeStatus.ERROR_ENV,
                None if timeout else exc, seed=job.seed, sample_index=job.sample_index)
        if trajectory.status is EpisodeStatus.ERROR_TIMEOUT:
            self.env = None  # a call may still be running inside this env; never reuse it
        return trajectory

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
        self.env = None


def policy_factory(policy: Any, batch: bool = True) -> tuple[AgentFactory, Callable[[], None]]:
    """``(agent_factory, close)`` for an :class:`~agents.policy.LLMPolicy`.

    Local engines (``hf``, ``vllm``) are wrapped in a :class:`BatchingEngine` so concurrent
    episodes share forward passes; each episode gets ``policy.fork(seed)``. Call ``close``
    when the run is over to stop the batcher.
    """
    from agents.engines.batching import BatchingEngine

    template = policy
    closer: Callable[[], None] = lambda: None  # noqa: E731
    if batch and policy.engine.name in ("hf", "vllm") and not isinstance(policy.engine,
                                                                          BatchingEngine):
        batched = BatchingEngine(policy.engine)
        template = policy.fork()
        template.engine = batched
        closer = batched.close
    return (lambda env, seed: template.fork(seed)), closer


def _done_keys(path: Path) -> tuple[set[tuple[str, int]], list[Trajectory]]:
    """Read a previous run; rewrite it without a torn tail so appending stays valid JSONL."""
    if not path.exists():
        return set(), []
    kept = list(read_trajectories(path))
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for trajectory in kept:
            write_trajectory(handle, trajectory)
    os.replace(tmp, path)
    return {(t.task_id, t.sample_index) for t in kept}, kept


def run_rollouts(
    env_factory: Callable[[], Any],
    agent_factory: AgentFactory,
    *,
    task_indices: Iterable[int],
    samples: int = 1,
    concurrency: int = 4,
    seed: int = 0,
    episode_timeout_s: float | None = 600.0,
    max_tool_calls: int = 50,
    end_on_length: bool = True,
    out: str | Path | None = None,
    resume: bool = False,
    progress: bool = False,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> RolloutResult:
    """Run ``samples`` episodes of each task in ``task_indices`` on ``concurrency`` workers.

    ``env_factory()`` makes one env per worker; ``agent_factory(env, seed)`` makes the agent
    for one episode (e.g. ``lambda env, seed: policy.fork(seed)``). With ``out`` every
    trajectory is appended to that JSONL as it finishes. The returned trajectories include
    those read back on resume, so summaries cover the whole run.
    """
    started = time.perf_counter()
    indices = list(task_indices)
    jobs = [Job(i, k, episode_seed(seed, i, k)) for i in indices for k in range(samples)]
    result = RolloutResult()
    handle = None
    lock = threading.Lock()
    if out is not None:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume:
            done, previous = _done_keys(path)
            if done:
                probe = env_factory()
                ids = [t.task_id for t in probe.unwrapped.tasks]
                probe.close()
                remaining = [j for j in jobs if (ids[j.task_index % len(ids)], j.sample_index)
                             not in done]
                result.skipped = len(jobs) - len(remaining)
                wanted = {(ids[j.task_index % len(ids)], j.sample_index) for j in jobs}
                result.trajectories.extend(t for t in previous
                                           if (t.task_id, t.sample_index) in wanted)
                jobs = remaining
        handle = open(path, "a" if resume else "w", encoding="utf-8")  # noqa: SIM115

    pending: queue.Queue[Job] = queue.Queue()
    for job in jobs:
        pending.put(job)
    bar = _progress(progress, len(jobs))
    episode_kwargs = {"max_tool_calls": max_tool_calls, "end_on_length": end_on_length}

    failures: list[BaseException] = []

    def work() -> None:
        worker = _Worker(env_factory, agent_factory)
        try:
            while True:
                try:
                    job = pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    trajectory = worker.run(job, episode_timeout_s, **episode_kwargs)
                except BaseException as exc:  # env_factory failed: a setup error, not the model's
                    failures.append(exc)
                    return
                with lock:
                    result.trajectories.append(trajectory)
                    if handle is not None:
                        write_trajectory(handle, trajectory)
                    if on_trajectory is not None:
                        on_trajectory(trajectory)
                    bar.advance(trajectory)
        finally:
            worker.close()

    threads = [threading.Thread(target=work, name=f"coa-rollout-{i}", daemon=True)
               for i in range(max(1, min(concurrency, len(jobs))))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        bar.close()
        if handle is not None:
            handle.close()
    result.wall_s = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"could not create an env: {failures[0]!r}") from failures[0]
    return result


class _progress:
    """A rich progress bar (or nothing) that shows the running mean reward and failures."""

    def __init__(self, enabled: bool, total: int):
        self.bar = None
        self.rewards: list[float] = []
        self.failures = 0
        if enabled and total:
            from rich.progress import Progress

            self.bar = Progress(transient=False)
            self.task = self.bar.add_task("episodes", total=total)
            self.bar.start()

    def advance(self, trajectory: Trajectory) -> None:
        self.rewards.append(trajectory.reward)
        self.failures += EpisodeStatus.parse(trajectory.status).is_error
        if self.bar is not None:
            mean = sum(self.rewards) / len(self.rewards)
            self.bar.update(self.task, advance=1,
                            description=f"reward {mean:.3f} · errors {self.failures}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
