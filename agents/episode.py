"""Record episodes as :class:`Trajectory` objects: the one recorder and the one episode loop.

:class:`EpisodeRecorder` is the only place that appends generated and observation segments,
counts tool calls and tool errors, and records how an episode ended (an
:class:`~agents.trajectory.EpisodeStatus`, reward, answer, truncation, reward details or
reward error). It is driven step by step, so loops with different shapes share it:

* :func:`run_episode` below, the sequential loop for any :class:`~agents.base.Agent`
  (``coa eval`` runs it on worker threads through :func:`agents.rollout.play_episode`);
* the RL rollout worker (``trainers/rl/rollout.py``), which batches generation across
  episodes, runs tool calls on a thread pool and appends token ids itself.

Because every path records through the same methods, a summary over eval trajectories and
one over RL trajectories of the same episodes agree (tested in tests/agents/test_episode.py).
Nothing here raises for an agent's, a model's or an env's fault: those end the episode
with an ``error:*`` status and the run goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agents.base import Agent, as_agent
from agents.trajectory import EpisodeStatus, Trajectory

__all__ = ["EpisodeRecorder", "EpisodeTimeout", "run_episode"]


class EpisodeTimeout(Exception):
    """Raised by a runner's ``call`` wrapper when the episode is past its deadline."""


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class EpisodeRecorder:
    """Builds one :class:`Trajectory` as the episode runs.

    Call :meth:`generated` for each model turn, :meth:`step` with each ``env.step`` result
    (returns True once the env ended the episode), :meth:`observation` for the text the
    model will see next, :meth:`end` when the loop itself stops the episode, and
    :meth:`finish` once at the end. The first ending recorded wins.
    """

    def __init__(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory
        self.done = False
        self._started = time.perf_counter()
        self._tool_latency = 0.0

    @classmethod
    def start(
        cls,
        env_id: str,
        prompt: str,
        info: Mapping[str, Any],
        *,
        seed: int | None = None,
        sample_index: int = 0,
        prompt_ids: Iterable[int] = (),
        messages: list[dict[str, str]] | None = None,
        extra_info: Mapping[str, Any] | None = None,
    ) -> EpisodeRecorder:
        """A recorder for an episode whose ``env.reset`` returned ``(prompt, info)``."""
        return cls(Trajectory(
            env_id=env_id, task_id=info["task_id"],
            prompt_messages=messages if messages is not None else list(info.get("messages") or []),
            prompt_text=prompt, prompt_ids=list(prompt_ids), seed=seed, sample_index=sample_index,
            info=dict(extra_info or {}),
        ))

    @classmethod
    def failed_start(
        cls,
        env_id: str,
        task_id: str,
        status: EpisodeStatus,
        error: BaseException | None = None,
        *,
        seed: int | None = None,
        sample_index: int = 0,
        extra_info: Mapping[str, Any] | None = None,
    ) -> Trajectory:
        """The record of an episode that never started (reset or agent construction failed)."""
        recorder = cls(Trajectory(env_id=env_id, task_id=task_id, seed=seed,
                                  sample_index=sample_index, info=dict(extra_info or {})))
        recorder.end(status, error=error)
        return recorder.finish()

    # -- segments -------------------------------------------------------------------------
    def generated(self, text: str, token_ids: Iterable[int] = (), logprobs: Iterable[float] = (),
                  versions: Iterable[int] = ()) -> None:
        """One model turn, with its sampled token ids and logprobs when the engine gave them
        (and, in RL, the policy version of each token)."""
        self.trajectory.add_generated(text if isinstance(text, str) else "", token_ids, logprobs,
                                      versions)

    def observation(self, text: str, token_ids: Iterable[int] = ()) -> None:
        """Env text the model sees next (nothing for the empty observation of an answer)."""
        if text:
            self.trajectory.add_observation(text, token_ids)

    # -- outcomes -------------------------------------------------------------------------
    def step(self, observation: str, reward: float, terminated: bool, truncated: bool,
             info: Mapping[str, Any]) -> bool:
        """Count one env step's tool calls and errors; record the ending if the env ended
        the episode. The observation is not appended here: see :meth:`observation`."""
        calls, errors = self.trajectory.tool_calls, self.trajectory.tool_errors
        tools = info.get("tool") or []
        for name in tools:
            calls[name] = calls.get(name, 0) + 1
        if tools:
            for name, kind in zip(tools, info.get("tool_error_kinds") or (), strict=False):
                if kind:
                    errors[name] = errors.get(name, 0) + 1
                    self._note_tool_error(name, str(kind), observation)
        elif info.get("error_kind"):  # the env had to correct the action itself (format, reward)
            errors["action"] = errors.get("action", 0) + 1
        self._tool_latency += float(info.get("tool_latency_s") or 0.0)
        if terminated or truncated:
            status = EpisodeStatus.OK if terminated else EpisodeStatus.truncation(info.get("truncation"))
            if terminated and _unscored(info):
                status = EpisodeStatus.ERROR_REWARD
            self._record_end(status, reward=reward, terminated=bool(terminated), info=info)
        return self.done

    def _note_tool_error(self, tool: str, kind: str, observation: str) -> None:
        """Count failed calls by tool and kind (``info["tool_error_kinds"]``: ``{"wiki_search":
        {"not_configured": 3}}``) and keep up to three distinct failure texts per tool
        (``info["tool_error_samples"]``): what a run summary needs to tell a tool that never
        worked (one failure, whatever was asked) from an agent that called it badly."""
        kinds = self.trajectory.info.setdefault("tool_error_kinds", {}).setdefault(tool, {})
        kinds[kind] = kinds.get(kind, 0) + 1
        samples = self.trajectory.info.setdefault("tool_error_samples", {}).setdefault(tool, [])
        text = f"({kind}) {' '.join(observation.split())[:300]}"
        if text not in samples and len(samples) < 3:
            samples.append(text)

    def end(self, status: EpisodeStatus, *, error: BaseException | str | None = None) -> None:
        """The loop ends the episode itself (a limit it enforces, or a failure)."""
        if isinstance(error, BaseException):
            error = _error_text(error)
        self._record_end(EpisodeStatus(status), error=error)

    def _record_end(self, status: EpisodeStatus, *, reward: float = 0.0, terminated: bool = False,
                    info: Mapping[str, Any] | None = None, error: str | None = None) -> None:
        if self.done:
            return
        self.done = True
        trajectory = self.trajectory
        trajectory.status = status
        trajectory.reward = float(reward)
        trajectory.terminated = terminated
        trajectory.truncated = status.is_truncated
        if error is not None:
            trajectory.info["error"] = error
        if info is not None:
            trajectory.answer = info.get("answer")
            for key in ("reward_details", "reward_error"):
                if info.get(key) is not None:
                    trajectory.info[key] = info[key]

    def finish(self) -> Trajectory:
        """Close the record: wall time, tool latency and response size go into ``info``."""
        trajectory = self.trajectory
        if not self.done:  # a loop that stopped without saying why; never reported as ok
            self.end(EpisodeStatus.ERROR_AGENT, error="the episode loop stopped before the episode ended")
        trajectory.info["wall_s"] = time.perf_counter() - self._started
        trajectory.info["tool_latency_s"] = self._tool_latency
        ids = trajectory.response_ids()
        trajectory.info["response_tokens"] = len(ids) if ids else None
        trajectory.info["response_chars"] = len(trajectory.response_text)
        return trajectory


def _unscored(info: Mapping[str, Any]) -> bool:
    """The env ended the episode on an answer that got no verdict: the reward raised, or its
    primary term did (:class:`~coa_envs.rewards.base.RewardUnavailable`, e.g. a judge that is
    down). Such an episode is ``error:reward``: counted, but neither right nor wrong."""
    if not info.get("reward_error"):
        return False
    from coa_envs.rewards.compose import primary_failed  # lazy: a leaf, but keep imports light

    details = info.get("reward_details")
    return not isinstance(details, Mapping) or "terms" not in details or primary_failed(details)


def _direct(fn: Callable[[], Any]) -> Any:
    return fn()


def run_episode(
    env: Any,
    agent: Agent | Callable[[str, dict[str, Any]], str],
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    sample_index: int = 0,
    max_tool_calls: int | None = None,
    end_on_length: bool = False,
    end_on_empty: bool = False,
    call: Callable[[Callable[[], Any]], Any] | None = None,
) -> Trajectory:
    """Play one episode of ``agent`` (an Agent or ``fn(observation, info) -> action``) in
    ``env`` and return its trajectory; never raises for an agent's, engine's or env's fault
    once the env is reset.

    The optional rules are the concurrent runner's (:func:`agents.rollout.play_episode`
    turns them on): ``max_tool_calls`` caps the calls of one episode; ``end_on_length`` ends
    it when a turn hit the engine's ``max_new_tokens`` (its tag never closed);
    ``end_on_empty`` ends it on an empty turn. ``call(fn)`` runs each agent call and env
    step (the runner passes a deadline-enforcing executor that raises
    :class:`EpisodeTimeout`). An agent with ``fill_trajectory`` (``LLMPolicy``) then replaces
    the text record with its token-exact one, and its ``end_episode`` frees what the engine
    kept for the episode (the hf engine's cached keys/values).
    """
    from agents.policy import EngineError

    agent = as_agent(agent)
    run = call or _direct
    observation, info = run(lambda: env.reset(seed=seed, options=options))
    recorder = EpisodeRecorder.start(env.unwrapped.config.env_id, observation, info, seed=seed,
                                     sample_index=sample_index)
    try:
        run(lambda: agent.reset(observation, info))
        while not recorder.done:
            action = run(lambda obs=observation, inf=info: agent.act(obs, inf))
            recorder.generated(action)
            completion = getattr(agent, "last_completion", None)
            if end_on_empty and (not isinstance(action, str) or not action.strip()):
                recorder.end(EpisodeStatus.ERROR_EMPTY_OUTPUT)
                break
            if end_on_length and completion is not None and completion.finish_reason == "length":
                recorder.end(EpisodeStatus.TRUNCATED_MAX_NEW_TOKENS)
                break
            try:
                observation, reward, terminated, truncated, info = run(lambda a=action: env.step(a))
            except EpisodeTimeout:
                raise
            except Exception as exc:  # envs turn every model fault into an observation
                recorder.end(EpisodeStatus.ERROR_ENV, error=exc)
                break
            recorder.step(observation, reward, terminated, truncated, info)
            recorder.observation(observation)
            if (not recorder.done and max_tool_calls is not None
                    and sum(recorder.trajectory.tool_calls.values()) >= max_tool_calls):
                recorder.end(EpisodeStatus.TRUNCATED_MAX_TOOL_CALLS)
    except EngineError as exc:
        recorder.end(EpisodeStatus.engine_error(exc.kind), error=str(exc))
    except EpisodeTimeout:
        recorder.end(EpisodeStatus.ERROR_TIMEOUT)
    except Exception as exc:
        recorder.end(EpisodeStatus.ERROR_AGENT, error=exc)
    filler = getattr(agent, "fill_trajectory", None)
    # After a timeout the agent may still be running on another thread: leave it alone.
    if callable(filler) and recorder.trajectory.status is not EpisodeStatus.ERROR_TIMEOUT:
        try:
            filler(recorder.trajectory)
        except Exception as exc:  # the text record is still valid
            recorder.trajectory.info["fill_error"] = _error_text(exc)
    _end_episode(agent, recorder.trajectory)
    return recorder.finish()


def _end_episode(agent: Agent, trajectory: Trajectory) -> None:
    """Let an agent with ``end_episode`` (``LLMPolicy``) free what it kept for this episode,
    e.g. the hf engine's cached keys/values. Thread-safe on the engine side, so it runs even
    after a timeout; a failure there is noted, never raised."""
    ender = getattr(agent, "end_episode", None)
    if callable(ender):
        try:
            ender()
        except Exception as exc:
            trajectory.info["end_episode_error"] = _error_text(exc)
