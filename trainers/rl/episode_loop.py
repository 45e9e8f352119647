"""The concurrent episodes of one rollout worker: start, generate, step, finish.

Up to ``slots`` episodes run at once. Every round, all episodes waiting for the model are
generated as one batch, while env steps (tool calls) of the others run on the worker's
thread pool, so a slow tool hides behind generation instead of stalling it
(``overlap_tools=False`` runs steps inline, the serialised baseline of the benchmark).
Episodes are recorded by :class:`agents.episode.EpisodeRecorder`, step by step, so RL
trajectories carry the same statuses, tool counts and reward details as eval's.

Partial rollouts: when the engine is interrupted mid-turn (a weight update in asynchronous
RL, ``HFEngine.interrupt``), a turn comes back ``finish_reason="abort"`` with the tokens it
had sampled; they are kept (ids, logprobs, and the policy version that sampled them) and the
turn resumes in the next round, under whatever weights the worker then serves, from the
context plus those tokens (``GenerationRequest.resume_ids``). The recorded turn is one
generated segment whose tokens carry their own versions and logprobs.

The loop serves two callers: :meth:`RolloutWorker.run` (a batch of jobs to the end, in the
caller's thread: the synchronous loop) and the worker's streaming thread (jobs arrive and
episodes leave continuously: the asynchronous loop).
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.episode import EpisodeRecorder
from agents.trajectory import EpisodeStatus, Trajectory

if TYPE_CHECKING:
    from trainers.rl.rollout import EpisodeJob, RolloutResult, RolloutWorker

__all__ = ["EpisodeLoop"]


@dataclass
class _Episode:
    key: Any
    job: EpisodeJob
    env: Any
    recorder: EpisodeRecorder
    context: list[int]
    turn: int = 0
    pending: Future | None = None
    # the current turn's tokens sampled before an interruption (a partial rollout)
    partial_ids: list[int] = field(default_factory=list)
    partial_logprobs: list[float] = field(default_factory=list)
    partial_versions: list[int] = field(default_factory=list)
    interruptions: int = 0

    @property
    def trajectory(self) -> Trajectory:
        return self.recorder.trajectory


class EpisodeLoop:
    """Runs episodes for ``worker``; ``on_done(key, trajectory)`` receives each one as it ends.

    ``free_envs`` (env index -> envs) fixes the envs a batch call may use; None lets the loop
    take envs from the worker's pool as it needs them (at most ``slots`` per env)."""

    def __init__(self, worker: RolloutWorker, slots: int, result: RolloutResult,
                 on_done: Callable[[Any, Trajectory], None],
                 free_envs: dict[Any, deque] | None = None) -> None:
        from trainers.rl.rollout import stop_strings

        self.worker = worker
        self.slots = slots
        self.result = result
        self.on_done = on_done
        self.fixed_envs = free_envs is not None
        self.free_envs: dict[Any, deque] = free_envs if free_envs is not None else {}
        self.queue: deque[tuple[Any, EpisodeJob]] = deque()
        self.active: dict[Any, _Episode] = {}
        self.stops = stop_strings()
        self.release = getattr(worker.engine, "release", None)  # the hf engine's cached keys/values

    @property
    def busy(self) -> bool:
        return bool(self.active or self.queue)

    def add(self, items: list[tuple[Any, EpisodeJob]]) -> None:
        self.queue.extend(items)

    # -- envs ------------------------------------------------------------------------------
    def _env_key(self, job: EpisodeJob) -> Any:
        return job.env_index if self.fixed_envs else (job.env_index, job.heldout)

    def _take_env(self, job: EpisodeJob) -> Any:
        key = self._env_key(job)
        if key not in self.free_envs:  # streaming: start from the worker's envs of this kind
            self.free_envs[key] = deque(self.worker._env_pool(0, job.heldout, job.env_index))
        free = self.free_envs[key]
        if not free:  # all busy: one more (at most ``slots`` are ever busy at once)
            pool = self.worker._env_pool(0, job.heldout, job.env_index)
            free.append(self.worker._env_pool(len(pool) + 1, job.heldout, job.env_index)[-1])
        return free.popleft()

    def _return_env(self, job: EpisodeJob, env: Any) -> None:
        self.free_envs[self._env_key(job)].append(env)

    # -- the loop ----------------------------------------------------------------------------
    def start_next(self) -> None:
        while self.queue and len(self.active) < self.slots:
            key, job = self.queue.popleft()
            env = self._take_env(job)
            try:
                self.active[key] = self.worker._start(job, env, key)
            except Exception as exc:  # a broken task/env ends this episode only
                self.on_done(key, EpisodeRecorder.failed_start(
                    self.worker._env_id(job), f"index:{job.task_index}", EpisodeStatus.ERROR_ENV,
                    exc, seed=job.seed, sample_index=job.sample_index,
                    extra_info=self.worker._job_info(job)))
                self._return_env(job, env)

    def finish(self, key: Any) -> None:
        episode = self.active.pop(key)
        if self.release is not None:
            self.release(episode.context)
        self.on_done(key, episode.recorder.finish())
        self._return_env(episode.job, episode.env)

    def harvest(self, block: bool, timeout: float | None = None) -> None:
        """Record the env steps that are done (with ``block``: wait for at least one, up to
        ``timeout`` seconds)."""
        pending = {e.pending: k for k, e in self.active.items() if e.pending is not None}
        if not pending:
            return
        t0 = time.perf_counter()
        ready, _ = wait(list(pending), timeout=timeout if block else 0,
                        return_when=FIRST_COMPLETED)
        if block:
            self.result.env_blocking_s += time.perf_counter() - t0
        for future in ready:
            key = pending[future]
            episode = self.active[key]
            episode.pending = None
            if self.worker._apply_step(episode, future):
                self.finish(key)

    def turn(self, block_timeout: float | None = None) -> None:
        """One round: take finished env steps, start episodes, generate for every episode
        waiting on the model (or, when none is, wait for an env step)."""
        self.harvest(block=False)
        self.start_next()
        waiting = [k for k, e in self.active.items() if e.pending is None]
        if not waiting:
            self.harvest(block=True, timeout=block_timeout)
            self.start_next()
            return
        self.generate(waiting)

    def generate(self, waiting: list[Any]) -> None:
        worker = self.worker
        version = worker.weights_version  # one generate call runs under one set of weights
        requests = [self._request(self.active[k]) for k in waiting]
        t0 = time.perf_counter()
        completions = worker.engine.generate(requests, requests[0].params)
        self.result.generation_s += time.perf_counter() - t0
        for key, completion in zip(waiting, completions, strict=True):
            episode = self.active[key]
            if not completion.ok:
                episode.recorder.end(EpisodeStatus.engine_error(completion.error_kind),
                                     error=completion.error)
                self.finish(key)
                continue
            ids, logprobs = list(completion.token_ids), list(completion.logprobs)
            self.result.generated_tokens += len(ids)
            if completion.finish_reason == "abort":  # resumes next round, maybe under new weights
                episode.partial_ids += ids
                episode.partial_logprobs += logprobs
                episode.partial_versions += [version] * len(ids)
                episode.interruptions += 1
                self.result.interrupted_turns += 1
                continue
            self._complete_turn(key, episode, completion, version)

    def _request(self, episode: _Episode) -> Any:
        from agents.engines import GenerationRequest, SamplingParams

        cfg = self.worker.config.rollout
        done = len(episode.partial_ids)
        seed = _turn_seed(episode.job.seed + 104_729 * episode.interruptions, episode.turn)
        params = SamplingParams(
            max_new_tokens=max(1, min(cfg.max_new_tokens - done,
                                      self.worker._budget(episode) - done)),
            temperature=cfg.temperature, top_p=cfg.top_p, stop=self.stops, seed=seed)
        return GenerationRequest(token_ids=tuple(episode.context + episode.partial_ids),
                                 params=params, resume_ids=tuple(episode.partial_ids))

    def _complete_turn(self, key: Any, episode: _Episode, completion: Any, version: int) -> None:
        ids, logprobs = list(completion.token_ids), list(completion.logprobs)
        versions = [version] * len(ids)
        if episode.partial_ids:  # a resumed turn: one segment, each token with its own version
            ids = episode.partial_ids + ids
            whole = len(logprobs) == len(completion.token_ids) and \
                len(episode.partial_logprobs) == len(episode.partial_ids)
            logprobs = episode.partial_logprobs + logprobs if whole else []
            versions = episode.partial_versions + versions
            text = self.worker.tokenizer.decode(ids, skip_special_tokens=False)
            completion = dataclasses.replace(completion, text=text, token_ids=tuple(ids),
                                             logprobs=tuple(logprobs))
            episode.partial_ids, episode.partial_logprobs, episode.partial_versions = [], [], []
        episode.recorder.generated(completion.text, ids, logprobs, versions)
        episode.context.extend(ids)
        episode.turn += 1
        action = completion.action_text
        if self.worker.overlap_tools:
            episode.pending = self.worker._pool.submit(_timed_step, episode.env, action)
            return
        future: Future = Future()
        t1 = time.perf_counter()
        try:
            future.set_result(_timed_step(episode.env, action))
        except Exception as exc:
            future.set_exception(exc)
        self.result.env_blocking_s += time.perf_counter() - t1
        if self.worker._apply_step(episode, future):
            self.finish(key)


def _timed_step(env: Any, action: str) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = env.step(action)
    return out, time.perf_counter() - t0


def _turn_seed(seed: int, turn: int) -> int:
    return (seed * 1_000_003 + turn * 7919) % (2**62)
