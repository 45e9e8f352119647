"""External-agent rollouts: the RL loop trains the model inside an agent it does not own.

With ``rollout.agent: module:function`` (or ``path/to/file.py:function``) a rollout worker
plays each episode job by handing an agent callable (:mod:`agents.gateway.client`) a
gateway session on the job's task, instead of running its own episode loop. The gateway
sits in front of the worker's own engine (same weights, synced after every update) and is
served on 127.0.0.1 for the agent's HTTP client; the agent talks to the model, calls the
env's tools through the session, and returns its answer, which the env scores. Each
session comes back as token-exact trajectories (several segments when the agent's prompts
do not extend each other), which the loop groups and trains on like its own episodes.

What the RL recipe needs is forced on every session, whatever the agent asks for: the
rollout temperature and top-p (the learner recomputes logprobs at that temperature), at
most ``max_new_tokens`` per call and ``max_response_tokens`` generated tokens per episode
(past it the episode ends as ``truncated:response_tokens``), and a seed derived from the
job's, so a rerun samples the same. Group sampling is the loop's: ``group_size`` sessions
per task. Every finished session is appended to ``<output_dir>/gateway/rollouts_w<N>.jsonl``
(``coa view`` opens it).
"""

from __future__ import annotations

import contextlib
import copy
import queue
import secrets
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.episode import EpisodeRecorder
from agents.trajectory import EpisodeStatus, Trajectory

if TYPE_CHECKING:
    from trainers.rl.rollout import EpisodeJob, RolloutResult, RolloutWorker

__all__ = ["ExternalRollouts"]

MODEL_NAME = "policy"  # what the gateway calls the model being trained


class ExternalRollouts:
    """The worker's engine behind a gateway, and a thread per episode running the agent."""

    def __init__(self, worker: RolloutWorker) -> None:
        from agents.gateway.app import create_gateway_app
        from agents.gateway.client import load_callable
        from agents.gateway.core import Gateway
        from agents.gateway.local import LocalBackend
        from agents.gateway.prompts import resolve_chat_template
        from coa_envs.service.running import serve_in_thread

        self.worker = worker
        config = worker.config
        rollout = config.rollout
        self.agent = load_callable(str(rollout.agent), rollout.agent_kwargs)
        template = resolve_chat_template(rollout.agent_chat_template) if rollout.agent_chat_template else None
        tokenizer = copy.deepcopy(worker.tokenizer) if template else worker.tokenizer  # the learner's stays
        backend = LocalBackend(worker.engine, tokenizer, chat_template=template,
                               default_max_tokens=rollout.max_new_tokens,
                               max_batch_size=max(rollout.episodes_in_flight, 1))
        out = Path(config.bookkeeping.output_dir) / "gateway" / f"rollouts_w{worker.worker_index}.jsonl"
        # Finished sessions are in the output file: keep few in memory (each holds its token ids).
        self.gateway = Gateway(backend, MODEL_NAME, out=out, keep_finished=rollout.episodes_in_flight)
        self._stack = contextlib.ExitStack()
        # The agents of a group play one task at once: none may list the others' sessions (and so
        # read a finished sibling's paid answer, or finish it). The loop needs no listing itself.
        app = create_gateway_app(self.gateway, close_on_shutdown=False, admin_token=secrets.token_urlsafe(32))
        self.url = self._stack.enter_context(serve_in_thread(app))
        self._pool = ThreadPoolExecutor(max_workers=rollout.episodes_in_flight,
                                        thread_name_prefix=f"rollout{worker.worker_index}-agent")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._stack.close()
        self.gateway.close()

    def run(self, jobs: list[EpisodeJob]) -> RolloutResult:
        """Every job played by the agent; trajectories in the jobs' order (a job's segments
        together). Held-out jobs (the periodic eval) give one trajectory per episode."""
        from trainers.rl.rollout import RolloutResult

        started = time.perf_counter()
        heldout = bool(jobs) and jobs[0].heldout
        slots = min(self.worker.config.rollout.episodes_in_flight, max(len(jobs), 1))
        free: dict[int, queue.Queue] = {}
        for env_index in sorted({job.env_index for job in jobs}):
            free[env_index] = queue.Queue()
            for env in self.worker._env_pool(slots, heldout, env_index)[:slots]:
                free[env_index].put(env)
        sessions: dict[int, Any] = {}
        futures = [self._pool.submit(self._play, index, job, free[job.env_index], sessions)
                   for index, job in enumerate(jobs)]
        wait(futures, timeout=self.worker.config.rollout.timeout_s)
        played: list[list[Trajectory]] = []
        for index, (job, future) in enumerate(zip(jobs, futures, strict=True)):
            if future.done():
                played.append(future.result())
            elif index in sessions:  # the agent is still running: the episode ends here
                played.append(self.gateway.finish(sessions[index], status=EpisodeStatus.ERROR_TIMEOUT,
                                                  failed="the agent ran past rollout.timeout_s"))
            else:
                played.append([self._failed(job, EpisodeStatus.ERROR_TIMEOUT, "never started")])
        if heldout:
            played = [segments[-1:] for segments in played]
        trajectories = [t for segments in played for t in segments]
        result = RolloutResult(trajectories=trajectories)
        result.wall_s = result.generation_s = time.perf_counter() - started
        result.generated_tokens = sum(len(s.token_ids) for t in trajectories for s in t.segments
                                      if s.kind == "generated")
        errors: dict[str, int] = {}
        for segments in played:
            if segments and segments[0].status.is_error:
                errors[segments[0].status.reason] = errors.get(segments[0].status.reason, 0) + 1
        result.errors = errors
        return result

    def _failed(self, job: EpisodeJob, status: EpisodeStatus, error: Any) -> Trajectory:
        return EpisodeRecorder.failed_start(self.worker._env_id(job), f"index:{job.task_index}", status, error,
                                            seed=job.seed, sample_index=job.sample_index,
                                            extra_info=self._info(job))

    def _info(self, job: EpisodeJob) -> dict[str, Any]:
        return {"group_id": job.group_id, "task_index": job.task_index, "env_index": job.env_index,
                "weights_version": self.worker.weights_version, "env_s": 0.0}

    def _play(self, index: int, job: EpisodeJob, envs: queue.Queue, sessions: dict[int, Any]) -> list[Trajectory]:
        from agents.gateway.client import task_from_reply
        from agents.gateway.sessions import ForcedSampling

        rollout = self.worker.config.rollout
        env = envs.get()
        try:
            forced = ForcedSampling(temperature=rollout.temperature, top_p=rollout.top_p,
                                    max_tokens=rollout.max_new_tokens,
                                    max_generated_tokens=rollout.max_response_tokens, seed=job.seed)
            try:
                session = self.gateway.open_session(env=env, env_id=self.worker._env_id(job),
                                                    task_index=job.task_index, seed=job.seed,
                                                    sample_index=job.sample_index, forced=forced,
                                                    info=self._info(job))
            except Exception as exc:  # a broken task/env ends this episode only
                return [self._failed(job, EpisodeStatus.ERROR_ENV, exc)]
            sessions[index] = session
            task = task_from_reply(self.gateway.describe_session(session, self.url), self.url)
            answer, failed, status = None, None, None
            try:
                answer = self.agent(task)
            except Exception as exc:  # the agent (or its framework) failed
                failed = f"{type(exc).__name__}: {exc}"
            if session.generated_tokens() >= rollout.max_response_tokens:
                status, failed = EpisodeStatus.TRUNCATED_RESPONSE_TOKENS, None
            trajectories = self.gateway.finish(session, answer=answer if isinstance(answer, str) else None,
                                               failed=failed, status=status)
            self._release(session)
            return trajectories
        finally:
            envs.put(env)

    def _release(self, session: Any) -> None:
        """Free the keys/values the hf engine kept for the session's calls."""
        release = getattr(self.worker.engine, "release", None)
        if release is not None:
            for call in session.snapshot():
                release(call.context_ids)
