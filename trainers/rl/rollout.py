"""Rollout worker: owns envs and an inference engine, turns episode jobs into Trajectories.

Token-exact multi-turn episodes: the context is ``prompt_ids`` (chat template, generation
prompt) followed by every generated segment's *sampled* ids and every observation's ids;
nothing is re-tokenised. Up to ``episodes_in_flight`` episodes run at once: all episodes
waiting for the model are generated as one batch, while env steps (tool calls) of the
others run on a thread pool, so a slow tool hides behind generation instead of stalling
it (``overlap_tools=False`` runs steps inline, the serialised baseline of the benchmark).
Episodes are recorded by :class:`agents.episode.EpisodeRecorder`, step by step, so RL
trajectories carry the same statuses, tool counts and reward details as eval's.
Plain Python; ``actors.py`` wraps it as a Ray actor and the local mode calls it directly.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.episode import EpisodeRecorder
from agents.trajectory import EpisodeStatus, Trajectory

if TYPE_CHECKING:
    from trainers.rl.config import RLConfig

__all__ = ["EpisodeJob", "RolloutResult", "RolloutWorker", "make_env"]


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


def make_env(config: RLConfig, heldout: bool = False, env_index: int = 0) -> Any:
    """``gymnasium.make`` of the configured env (entry ``env_index`` of a mixture) on its
    training tasks (``task_options.split``, default ``train``; only those of ``env.task_list``
    when set), or with ``heldout`` on its held-out tasks (``split: test``, ``env.eval_kwargs``
    merged over its kwargs); a remote client when ``env.url`` is set. Registers the coa ids
    on import."""
    import gymnasium as gym

    import coa_envs  # noqa: F401 - registers the ids
    from trainers.common import deep_merge

    entry = config.env.mixture[env_index]
    kwargs = {"max_turns": config.env.max_turns, **entry.env_kwargs}
    if heldout:
        kwargs = deep_merge(kwargs, config.env.eval_kwargs)
    options = dict(kwargs.get("task_options") or {})
    kwargs["task_options"] = {**options, "split": "test" if heldout
                              else options.get("split", "train")}
    if config.env.task_list and not heldout:  # a filtered list of training tasks (coa filter-tasks)
        kwargs["task_options"]["task_list"] = config.env.task_list
    if config.env.url:  # the env runs in a `coa serve-env` server; this is its client
        from coa_envs.registry import REMOTE_ID

        return gym.make(REMOTE_ID, base_url=config.env.url, env_id=entry.id, overrides=kwargs)
    return gym.make(entry.id, **kwargs)


@dataclass
class _Episode:
    job: EpisodeJob
    env: Any
    recorder: EpisodeRecorder
    context: list[int]
    turn: int = 0
    pending: Future | None = None

    @property
    def trajectory(self) -> Trajectory:
        return self.recorder.trajectory


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
        self._envs: dict[tuple[int, bool], list[Any]] = {}  # (env_index, heldout) -> envs
        self._pool = ThreadPoolExecutor(max_workers=config.rollout.tool_threads,
                                        thread_name_prefix=f"rollout{worker_index}-env")

    # -- weights -------------------------------------------------------------------------
    def set_weights(self, state: Any, version: int) -> int:
        """Load learner weights into the engine; returns the version now served."""
        _load_engine_weights(self.engine, state)
        self.weights_version = version
        return version

    def ping(self) -> str:
        return "pong"

    def apply(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """``func(self, ...)``: the call shape RLlib's FaultTolerantActorManager uses."""
        return func(self, *args, **kwargs)

    def close(self) -> None:
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
        from agents.engines import GenerationRequest, SamplingParams

        cfg = self.config.rollout
        started = time.perf_counter()
        heldout = bool(jobs) and jobs[0].heldout
        if any(job.heldout != heldout for job in jobs):
            raise ValueError("one run() call takes training jobs or held-out jobs, not both")
        slots = min(cfg.episodes_in_flight, max(len(jobs), 1))
        # Up to ``slots`` envs of each env a job names (a mixture's batch spans several).
        free_envs = {k: deque(self._env_pool(slots, heldout, k)[:slots])
                     for k in sorted({job.env_index for job in jobs})}
        queue = deque(enumerate(jobs))
        active: dict[int, _Episode] = {}
        done: dict[int, Trajectory] = {}
        result = RolloutResult(trajectories=[])
        stops = tuple(_stop_strings())

        def start_next() -> None:
            while queue and len(active) < slots:
                index, job = queue.popleft()
                env = free_envs[job.env_index].popleft()
                try:
                    active[index] = self._start(job, env)
                except Exception as exc:  # a broken task/env ends this episode only
                    done[index] = EpisodeRecorder.failed_start(
                        self._env_id(job), f"index:{job.task_index}", EpisodeStatus.ERROR_ENV,
                        exc, seed=job.seed, sample_index=job.sample_index,
                        extra_info={"group_id": job.group_id, "task_index": job.task_index,
                                    "env_index": job.env_index})
                    free_envs[job.env_index].append(env)

        release = getattr(self.engine, "release", None)  # the hf engine's cached keys/values

        def finish(index: int) -> None:
            episode = active.pop(index)
            if release is not None:
                release(episode.context)
            done[index] = episode.recorder.finish()
            free_envs[episode.job.env_index].append(episode.env)

        def harvest(block: bool) -> None:
            pending = {e.pending: i for i, e in active.items() if e.pending is not None}
            if not pending:
                return
            t0 = time.perf_counter()
            ready, _ = wait(list(pending), timeout=None if block else 0,
                            return_when=FIRST_COMPLETED)
            if block:
                result.env_blocking_s += time.perf_counter() - t0
            for future in ready:
                index = pending[future]
                episode = active[index]
                episode.pending = None
                if self._apply_step(episode, future):
                    finish(index)

        start_next()
        # ``queue`` too: every active episode may end inside one generation round (serialised
        # steps, engine errors) while jobs still wait for an env.
        while active or queue:
            harvest(block=False)
            start_next()
            waiting = [i for i, e in active.items() if e.pending is None]
            if not waiting:
                harvest(block=True)
                start_next()
                continue
            requests = []
            for i in waiting:
                episode = active[i]
                params = SamplingParams(
                    max_new_tokens=max(1, min(cfg.max_new_tokens, self._budget(episode))),
                    temperature=cfg.temperature, top_p=cfg.top_p, stop=stops,
                    seed=_turn_seed(episode.job.seed, episode.turn))
                requests.append(GenerationRequest(token_ids=tuple(episode.context), params=params))
            t0 = time.perf_counter()
            completions = self.engine.generate(requests, requests[0].params)
            result.generation_s += time.perf_counter() - t0
            for i, completion in zip(waiting, completions, strict=True):
                episode = active[i]
                if not completion.ok:
                    episode.recorder.end(EpisodeStatus.engine_error(completion.error_kind),
                                         error=completion.error)
                    finish(i)
                    continue
                ids, logprobs = list(completion.token_ids), list(completion.logprobs)
                result.generated_tokens += len(ids)
                episode.recorder.generated(completion.text, ids, logprobs)
                episode.context.extend(ids)
                episode.turn += 1
                action = completion.action_text
                if self.overlap_tools:
                    episode.pending = self._pool.submit(_timed_step, episode.env, action)
                else:
                    future: Future = Future()
                    t1 = time.perf_counter()
                    try:
                        future.set_result(_timed_step(episode.env, action))
                    except Exception as exc:
                        future.set_exception(exc)
                    result.env_blocking_s += time.perf_counter() - t1
                    if self._apply_step(episode, future):
                        finish(i)
        result.trajectories = [done[i] for i in range(len(jobs))]
        result.env_s = sum(float(t.info.get("env_s", 0.0)) for t in result.trajectories)
        result.errors = dict(Counter(t.status.reason for t in result.trajectories if t.status.is_error))
        result.wall_s = time.perf_counter() - started
        return result

    # -- one episode's pieces ------------------------------------------------------------
    def _env_id(self, job: EpisodeJob) -> str:
        return self.config.env.mixture[job.env_index].id

    def _start(self, job: EpisodeJob, env: Any) -> _Episode:
        prompt, info = env.reset(seed=job.seed, options={"task_index": job.task_index})
        messages = info.get("messages") or [{"role": "user", "content": prompt}]
        prompt_ids = list(self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False))
        recorder = EpisodeRecorder.start(
            self._env_id(job), prompt, info, seed=job.seed, sample_index=job.sample_index,
            prompt_ids=prompt_ids, messages=messages,
            extra_info={"group_id": job.group_id, "task_index": job.task_index, "env_s": 0.0,
                        "weights_version": self.weights_version, "env_index": job.env_index},
        )
        return _Episode(job=job, env=env, recorder=recorder, context=list(prompt_ids))

    def _budget(self, episode: _Episode) -> int:
        """Response tokens the episode may still use: the cap counts every token after the
        prompt, as the overlong term (coa_envs/rewards/overlong.py) does."""
        return self.config.rollout.max_response_tokens - len(episode.trajectory.response_ids())

    def _apply_step(self, episode: _Episode, future: Future) -> bool:
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


def _timed_step(env: Any, action: str) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = env.step(action)
    return out, time.perf_counter() - t0


def _turn_seed(seed: int, turn: int) -> int:
    return (seed * 1_000_003 + turn * 7919) % (2**62)


def _stop_strings() -> tuple[str, ...]:
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
