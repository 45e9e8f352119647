"""Rollout worker: owns envs and an inference engine, turns episode jobs into Trajectories.

Token-exact multi-turn episodes: the context is ``prompt_ids`` (chat template, generation
prompt) followed by every generated segment's *sampled* ids and every observation's ids;
nothing is re-tokenised. The scheduling of concurrent episodes (batched generation, tool
calls on a thread pool, partial turns) is :class:`trainers.rl.episode_loop.EpisodeLoop`.

Two ways to drive a worker:

* :meth:`RolloutWorker.run`: a batch of jobs to the end, then return (the synchronous loop,
  ``algorithm.max_staleness: 0``); weights change only between calls (:meth:`set_weights`).
* streaming (asynchronous RL): :meth:`start_stream` runs the episode loop on a thread of
  its own; :meth:`submit` adds jobs, :meth:`collect` takes finished episodes, and
  :meth:`offer_weights` hands new weights over without stopping anything: the loop loads
  them before its next generation round, and an engine that can be interrupted
  (``HFEngine.interrupt``) stops the round in flight, so turns resume under the new
  weights (partial rollouts). A job waits until the worker serves at least its
  ``min_version``, which bounds every episode's staleness.

Plain Python; ``actors.py`` wraps it as a Ray actor and the local mode calls it directly.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.episode import EpisodeRecorder
from agents.trajectory import EpisodeStatus, Trajectory
from trainers.rl.envs import make_env
from trainers.rl.episode_loop import EpisodeLoop

if TYPE_CHECKING:
    from trainers.rl.config import RLConfig

__all__ = ["EpisodeJob", "RolloutResult", "RolloutWorker", "make_env", "stop_strings"]


@dataclass(frozen=True, slots=True)
class EpisodeJob:
    """One episode to run: which task, which sample of its group, and its sampling seed.

    ``heldout`` jobs index the env's held-out tasks (``split: test``, the periodic eval);
    the others index the training tasks. ``env_index`` picks the env of a mixture
    (``env.envs``; 0 for a single env).
    """

    task_index: int
    group_id: int
    sample_index: int
    seed: int
    heldout: bool = False
    env_index: int = 0
    step: int = 0
    """The RL step the episode is drawn for (its group's step; 0 for evals)."""
    min_version: int = -1
    """Streaming: the worker starts the episode only once it serves this policy version or a
    newer one (asynchronous RL's staleness bound)."""


@dataclass
class RolloutResult:
    """Trajectories of one call plus where the time went (for the step-time split)."""

    trajectories: list[Trajectory]
    generation_s: float = 0.0
    env_s: float = 0.0
    env_blocking_s: float = 0.0
    wall_s: float = 0.0
    generated_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    interrupted_turns: int = 0


class RolloutWorker:
    """Envs + engine in one process. ``set_weights`` after every learner update."""

    def __init__(self, config: RLConfig, worker_index: int = 0, engine: Any = None,
                 tokenizer: Any = None, overlap_tools: bool = True) -> None:
        self.config = config
        self.worker_index = worker_index
        if config.resources.torch_threads > 0:
            import torch

            torch.set_num_threads(config.resources.torch_threads)
        self.overlap_tools = overlap_tools
        if engine is None:
            engine, tokenizer = _build_engine(config)
        self.engine = engine
        self.tokenizer = tokenizer if tokenizer is not None else engine.tokenizer
        self.weights_version = -1
        self._external: Any = None  # the gateway + agent runner when rollout.agent is set
        self._envs: dict[tuple[int, bool], list[Any]] = {}  # (env_index, heldout) -> envs
        self._pool = ThreadPoolExecutor(max_workers=config.rollout.tool_threads,
                                        thread_name_prefix=f"rollout{worker_index}-env")
        # streaming state (asynchronous RL), guarded by _cv
        self._cv = threading.Condition()
        self._inbox: list[tuple[Any, EpisodeJob]] = []
        self._outbox: list[tuple[Any, Trajectory]] = []
        self._offered: tuple[Any, int] | None = None
        self._stream_stats = RolloutResult(trajectories=[])
        self._stream: threading.Thread | None = None
        self._stream_error: BaseException | None = None
        self._closing = False

    # -- weights -------------------------------------------------------------------------
    def set_weights(self, state: Any, version: int) -> int:
        """Load learner weights into the engine; returns the version now served."""
        _load_engine_weights(self.engine, state)
        self.weights_version = version
        return version

    def offer_weights(self, state: Any, version: int) -> int:
        """Streaming: new weights for the loop to load before its next generation round;
        an interruptible engine stops the round in flight (its turns resume under them).
        Returns at once."""
        with self._cv:
            self._offered = (state, version)
            self._cv.notify_all()
        interrupt = getattr(self.engine, "interrupt", None)
        if interrupt is not None and self.config.rollout.interrupt_generation:
            interrupt()
        return version

    def _load_offered(self) -> None:
        clear = getattr(self.engine, "clear_interrupt", None)
        if clear is not None:
            clear()
        with self._cv:
            offered, self._offered = self._offered, None
        if offered is not None:
            self.set_weights(*offered)

    def ping(self) -> str:
        return "pong"

    def apply(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """``func(self, ...)``: the call shape RLlib's FaultTolerantActorManager uses."""
        return func(self, *args, **kwargs)

    def close(self) -> None:
        self.stop_stream()
        if self._external is not None:
            self._external.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for envs in self._envs.values():
            for env in envs:
                env.close()
            envs.clear()

    # -- episodes ------------------------------------------------------------------------
    def num_tasks(self, heldout: bool = False, env_index: int = 0) -> int:
        return len(self._env_pool(1, heldout, env_index)[0].unwrapped.tasks)

    def _env_pool(self, size: int, heldout: bool = False, env_index: int = 0) -> list[Any]:
        envs = self._envs.setdefault((env_index, heldout), [])
        while len(envs) < size:
            envs.append(make_env(self.config, heldout, env_index))
        return envs

    def run(self, jobs: list[EpisodeJob]) -> RolloutResult:
        """Run every job to the end of its episode; the result keeps the jobs' order.

        The jobs of one call are all training jobs or all held-out jobs."""
        if self._stream is not None:
            raise RuntimeError("this worker is streaming: submit() jobs and collect() them")
        if self.config.rollout.agent:  # an external agent plays the episodes (trainers/rl/external.py)
            if self._external is None:
                from trainers.rl.external import ExternalRollouts

                self._external = ExternalRollouts(self)
            return self._external.run(jobs)
        started = time.perf_counter()
        heldout = bool(jobs) and jobs[0].heldout
        if any(job.heldout != heldout for job in jobs):
            raise ValueError("one run() call takes training jobs or held-out jobs, not both")
        slots = min(self.config.rollout.episodes_in_flight, max(len(jobs), 1))
        # Up to ``slots`` envs of each env a job names (a mixture's batch spans several).
        free_envs = {k: deque(self._env_pool(slots, heldout, k)[:slots])
                     for k in sorted({job.env_index for job in jobs})}
        done: dict[int, Trajectory] = {}
        result = RolloutResult(trajectories=[])
        loop = EpisodeLoop(self, slots, result, done.__setitem__, free_envs)
        loop.add(list(enumerate(jobs)))
        loop.start_next()
        # ``queue`` too: every active episode may end inside one generation round (serialised
        # steps, engine errors) while jobs still wait for an env.
        while loop.busy:
            loop.turn()
        result.trajectories = [done[i] for i in range(len(jobs))]
        result.env_s = sum(float(t.info.get("env_s", 0.0)) for t in result.trajectories)
        result.errors = dict(Counter(t.status.reason for t in result.trajectories if t.status.is_error))
        result.wall_s = time.perf_counter() - started
        return result

    # -- streaming (asynchronous RL) -------------------------------------------------------
    def start_stream(self) -> None:
        """Run the episode loop on a thread of its own until :meth:`stop_stream`."""
        if self._stream is None:
            self._closing = False
            self._stream = threading.Thread(target=self._stream_main, daemon=True,
                                            name=f"rollout{self.worker_index}-stream")
            self._stream.start()

    def stop_stream(self) -> None:
        """End the streaming thread; episodes in flight are abandoned."""
        if self._stream is None:
            return
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        interrupt = getattr(self.engine, "interrupt", None)
        if interrupt is not None:
            interrupt()
        self._stream.join(timeout=60)
        self._stream = None
        clear = getattr(self.engine, "clear_interrupt", None)
        if clear is not None:  # run() may follow
            clear()

    def submit(self, items: list[tuple[Any, EpisodeJob]]) -> int:
        """Queue ``(key, job)`` pairs; each comes back from :meth:`collect` under its key."""
        with self._cv:
            self._inbox.extend(items)
            self._cv.notify_all()
        return len(items)

    def collect(self, timeout: float = 0.0) -> tuple[list[Any], RolloutResult]:
        """``(keys, result)``: the episodes finished since the last call (waiting up to
        ``timeout`` seconds for one) and where the time went meanwhile."""
        with self._cv:  # other notifications (offered weights, jobs) do not end the wait
            self._cv.wait_for(lambda: self._outbox or self._stream_error is not None, timeout)
            if self._stream_error is not None:
                raise RuntimeError("the rollout stream failed") from self._stream_error
            items, self._outbox = self._outbox, []
            stats, self._stream_stats = self._stream_stats, RolloutResult(trajectories=[])
        stats.trajectories = [t for _, t in items]
        stats.env_s = sum(float(t.info.get("env_s", 0.0)) for t in stats.trajectories)
        stats.errors = dict(Counter(t.status.reason for t in stats.trajectories if t.status.is_error))
        return [key for key, _ in items], stats

    def _stream_main(self) -> None:
        result = RolloutResult(trajectories=[])
        finished: list[tuple[Any, Trajectory]] = []  # handed over with the round's stats
        loop = EpisodeLoop(self, self.config.rollout.episodes_in_flight, result,
                           lambda key, trajectory: finished.append((key, trajectory)))
        try:
            while not self._closing:
                self._load_offered()
                ready: list[tuple[Any, EpisodeJob]] = []
                waiting: list[tuple[Any, EpisodeJob]] = []
                with self._cv:  # jobs whose version the worker now serves join the loop
                    for item in self._inbox:
                        fresh_enough = item[1].min_version <= self.weights_version
                        (ready if fresh_enough else waiting).append(item)
                    self._inbox = waiting
                    if not ready and not loop.busy:
                        self._cv.wait(0.05)
                loop.add(ready)
                if loop.busy:
                    loop.turn(block_timeout=0.02)
                with self._cv:  # the finished episodes and where the time went, together
                    self._outbox.extend(finished)
                    _accumulate(self._stream_stats, result)
                    if finished:
                        self._cv.notify_all()
                finished.clear()
                result.generation_s = result.env_blocking_s = 0.0
                result.generated_tokens = result.interrupted_turns = 0
        except BaseException as exc:  # surfaces in collect(), never a silent dead thread
            with self._cv:
                self._stream_error = exc
                self._cv.notify_all()

    # -- one episode's pieces ------------------------------------------------------------
    def _env_id(self, job: EpisodeJob) -> str:
        return self.config.env.mixture[job.env_index].id

    def _job_info(self, job: EpisodeJob) -> dict[str, Any]:
        return {"group_id": job.group_id, "task_index": job.task_index,
                "env_index": job.env_index, "step": job.step}

    def _start(self, job: EpisodeJob, env: Any, key: Any = None) -> Any:
        from trainers.rl.episode_loop import _Episode

        prompt, info = env.reset(seed=job.seed, options={"task_index": job.task_index})
        messages = info.get("messages") or [{"role": "user", "content": prompt}]
        prompt_ids = list(self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False))
        recorder = EpisodeRecorder.start(
            self._env_id(job), prompt, info, seed=job.seed, sample_index=job.sample_index,
            prompt_ids=prompt_ids, messages=messages,
            extra_info={**self._job_info(job), "env_s": 0.0,
                        "weights_version": self.weights_version},
        )
        return _Episode(key=key, job=job, env=env, recorder=recorder, context=list(prompt_ids))

    def _budget(self, episode: Any) -> int:
        """Response tokens the episode may still use: the cap counts every token after the
        prompt, as the overlong term (coa_envs/rewards/overlong.py) does."""
        return self.config.rollout.max_response_tokens - len(episode.trajectory.response_ids())

    def _apply_step(self, episode: Any, future: Future) -> bool:
        """Record one env step's outcome; True when the episode is over."""
        recorder = episode.recorder
        try:
            (observation, reward, terminated, truncated, info), seconds = future.result()
        except Exception as exc:  # envs should not raise; if one does, drop the episode
            recorder.end(EpisodeStatus.ERROR_ENV, error=exc)
            return True
        recorder.trajectory.info["env_s"] += seconds
        if recorder.step(observation, reward, terminated, truncated, info):
            # The env's last observation is never seen by the model: it stays out of the
            # token record (it would only lengthen the learner's sequences).
            return True
        obs_ids = self.tokenizer.encode(observation, add_special_tokens=False)
        if self._budget(episode) - len(obs_ids) < 1:
            # The response budget is spent: the episode ends unanswered (reward 0).
            recorder.end(EpisodeStatus.TRUNCATED_RESPONSE_TOKENS)
            return True
        recorder.observation(observation, obs_ids)
        episode.context.extend(obs_ids)
        return False


def _accumulate(into: RolloutResult, part: RolloutResult) -> None:
    into.generation_s += part.generation_s
    into.env_blocking_s += part.env_blocking_s
    into.generated_tokens += part.generated_tokens
    into.interrupted_turns += part.interrupted_turns


def stop_strings() -> tuple[str, ...]:
    """Every registered tool's closing tag, read now: a tool registered after import (a
    user's ``register_tool``) must stop generation too, or the env never answers its call."""
    from coa_envs.protocol import stop_strings

    return stop_strings()


def _build_engine(config: RLConfig) -> tuple[Any, Any]:
    """The configured engine around a policy built like the learner's (weights synced later)."""
    from agents.engines import build_engine
    from trainers.rl.models import load_tokenizer_and_policy

    if config.rollout.engine == "vllm":
        lora = config.model.lora
        extra = {"enable_lora": True, "max_lora_rank": lora.r} if lora.enabled else {}
        engine = build_engine("vllm", model=config.model.init_checkpoint or config.model.path,
                              **extra)
        return engine, engine.tokenizer
    tokenizer, model = load_tokenizer_and_policy(config)
    import torch

    device = "cuda" if config.resources.num_gpus > 0 and torch.cuda.is_available() else "cpu"
    engine = build_engine("hf", model=model, tokenizer=tokenizer, device=device,
                          dtype=config.model.dtype,
                          max_batch_size=max(config.rollout.episodes_in_flight, 1))
    return engine, tokenizer


def _load_engine_weights(engine: Any, state: Any) -> None:
    """New learner weights into the engine: LoRA adapters (``LoraWeights``) through its
    ``load_lora``; a full state dict through ``load_weights`` (vLLM: into every worker, then
    a prefix-cache reset) or ``load_state`` (hf: between decode steps), else straight into
    its transformers model."""
    from agents.engines.lora import LoraWeights

    if isinstance(state, LoraWeights):
        loader = getattr(engine, "load_lora", None)
        if loader is None:
            raise TypeError(f"engine {type(engine).__name__} cannot load LoRA adapters")
        loader(state)
        return
    loader = getattr(engine, "load_weights", None) or getattr(engine, "load_state", None)
    if loader is not None:
        loader(state)
        return
    model = getattr(engine, "model", None)
    if model is not None and hasattr(model, "load_state_dict"):
        model.load_state_dict(state, strict=True)
        return
    raise TypeError(f"engine {type(engine).__name__} exposes no weights to update")
