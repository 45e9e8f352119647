"""Playing an agent over an env's tasks: the runner behind ``coa eval``, ``coa filter-tasks`` and
``coa teach``, usable from Python without the command line.

A run is: the env's ``gym.make`` options and tasks (:func:`env_tasks`: the options given, a
split of the env's train/test partition, a data file, a turn limit, a protocol), an agent per
episode (:func:`agent_factory` for ``oracle``, ``replay:FILE``, ``llm`` or ``MODULE:NAME``;
:func:`episode_agents` builds the LLM policy of a model with :func:`build_policy`), and
:func:`play_tasks`, which plays K samples of each task with the concurrent runner
(:mod:`agents.rollout`), scores the reward's group terms over each task's samples and leaves
the trajectory file in task/sample order. :func:`load_selector` picks the best-of-K answer.

A setting that cannot work raises :class:`RunSetupError` naming the argument to fix
(``agent``, ``model``, ``options``, ``split``...); the command line turns that into the error
of the flag it came from.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coa_envs.errors import UserError

__all__ = [
    "RunSetupError",
    "agent_factory",
    "build_policy",
    "env_factory",
    "env_tasks",
    "episode_agents",
    "load_selector",
    "play_tasks",
    "split_description",
]


class RunSetupError(UserError, ValueError):
    """A run that cannot start as asked; ``argument`` names the setting to fix."""

    def __init__(self, message: str, argument: str) -> None:
        super().__init__(message)
        self.argument = argument


def _replay_factory(path: str, seed: int, task_indices: list[int], samples: int) -> Callable:
    """Per-episode replay agents: sample ``k`` of a task replays that task's ``k``-th recording."""
    from agents.replay import ReplayAgent
    from agents.rollout import episode_seed

    recordings = ReplayAgent(path).by_task
    sample_of = {episode_seed(seed, i, k): k for i in task_indices for k in range(samples)}

    class _OneReplay:
        def __init__(self, sample: int):
            self.sample, self.script = sample, []

        def reset(self, observation: str, info: dict[str, Any]) -> None:
            runs = recordings.get(info["task_id"])
            if not runs:
                raise KeyError(f"no recorded trajectory for task {info['task_id']!r}")
            self.script = list(runs[self.sample % len(runs)])

        def act(self, observation: str, info: dict[str, Any]) -> str:
            return self.script.pop(0) if self.script else ""

    return lambda env, episode: _OneReplay(sample_of.get(episode, 0))


def _import_object(spec: str, what: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise RunSetupError(f"cannot import {what} {spec!r}: {exc}", what) from None
    return obj


def agent_factory(spec: str, *, seed: int = 0, task_indices: list[int] | None = None,
                  samples: int = 1, policy: Any = None) -> Callable[[Any, int], Any]:
    """``(env, episode_seed) -> Agent`` for an agent spec: ``oracle`` (gold answers),
    ``replay:FILE`` (a recorded run's actions again), ``llm`` (forks of ``policy``) or
    ``MODULE:NAME`` (an Agent class, instantiated per episode -- with the episode's env, and its
    seed, when the constructor takes ``env`` (and ``seed``), as the scripted teacher does -- or
    a ``(observation, info) -> action`` callable)."""
    if spec == "oracle":
        from agents.oracle import OracleAgent

        return lambda env, episode: OracleAgent(env)
    if spec.startswith("replay:"):
        return _replay_factory(spec.split(":", 1)[1], seed, task_indices or [], samples)
    if spec == "llm":
        if policy is None:
            raise RunSetupError("the llm agent needs a model (--model)", "agent")
        return lambda env, episode: policy.fork(episode)
    if ":" in spec:
        from agents.base import as_agent

        obj = _import_object(spec, "agent")
        if isinstance(obj, type):
            import inspect

            wants = inspect.signature(obj).parameters
            if "env" in wants:  # an env-aware agent (a scripted teacher) gets the episode's env
                return lambda env, episode: obj(env, **({"seed": episode} if "seed" in wants else {}))
            return lambda env, episode: obj()
        agent = as_agent(obj)  # a stateless callable or a thread-safe agent instance
        return lambda env, episode: agent
    raise RunSetupError(f"unknown agent {spec!r}; use oracle, replay:FILE, llm or MODULE:NAME", "agent")


def load_selector(spec: str, judge_url: str | None = None, judge_model: str | None = None) -> Callable:
    """``majority`` (vote over normalised answers), ``judge`` (an LLM picks the answer; see
    :class:`agents.selectors.JudgeSelector`) or ``MODULE:NAME`` of a
    ``(task_id, trajectories) -> index`` selector (a reward model...)."""
    from agents.metrics import majority_vote

    if spec == "majority":
        return majority_vote
    if spec == "judge":
        from agents.selectors import JudgeSelector

        try:
            return JudgeSelector(judge_url, judge_model)
        except ValueError as exc:
            raise RunSetupError(str(exc), "judge") from None
    if ":" in spec:
        return _import_object(spec, "selector")
    raise RunSetupError(f"unknown selector {spec!r}; use majority, judge or MODULE:NAME", "selector")


def build_policy(*, engine: str, model: str, base_url: str | None, api_key: str | None,
                 api_mode: str, tokenizer: str | None, device: str, dtype: str,
                 sampling: Any, system_prompt: str | None, concurrency: int,
                 timeout_s: float, server_extensions: bool = True) -> Any:
    """An :class:`~agents.policy.LLMPolicy` over ``engine`` (hf, vllm or openai) serving ``model``."""
    from agents.engines import build_engine
    from agents.policy import LLMPolicy

    if engine == "hf":
        backend = build_engine("hf", model=model, device=device, dtype=dtype)
    elif engine == "vllm":
        backend = build_engine("vllm", model=model, dtype=dtype)
    elif engine == "openai":
        if not base_url:
            raise RunSetupError("the openai engine needs a base URL (--base-url)", "base_url")
        backend = build_engine("openai", base_url=base_url, model=model,
                               api_key=api_key or os.environ.get("OPENAI_API_KEY", "EMPTY"),
                               mode=api_mode, tokenizer=tokenizer, concurrency=concurrency,
                               timeout_s=timeout_s, server_extensions=server_extensions)
    else:
        raise RunSetupError(f"unknown engine {engine!r}; use hf, vllm or openai", "engine")
    return LLMPolicy(backend, sampling=sampling, system_prompt=system_prompt)


def episode_agents(agent: str, *, model: str | None, seed: int, task_indices: list[int], samples: int,
                   **policy_options: Any) -> tuple[Callable[[Any, int], Any], Callable[[], None]]:
    """``(factory, close)`` for an agent spec; ``llm`` builds the policy of ``model``
    (:func:`build_policy` with ``policy_options``) and batches its episodes."""
    if agent != "llm":
        return agent_factory(agent, seed=seed, task_indices=task_indices, samples=samples), (lambda: None)
    from agents.rollout import policy_factory

    if not model:
        raise RunSetupError("the llm agent needs a model (--model)", "model")
    return policy_factory(build_policy(model=model, **policy_options))


def env_factory(env_id: str, make_kwargs: dict[str, Any], env_url: str | None = None) -> Callable[[], Any]:
    """``make_env()`` for a run: ``gym.make`` in this process, or a ``coa/Remote-v0`` session on
    the env server at ``env_url`` (``coa serve-env``) with the same options."""
    import gymnasium as gym

    import coa_envs  # noqa: F401  (registers ids)

    if env_url:
        from coa_envs.registry import REMOTE_ID

        return lambda: gym.make(REMOTE_ID, base_url=env_url, env_id=env_id, overrides=make_kwargs)
    return lambda: gym.make(env_id, **make_kwargs)


def _check_options(env_id: str, stages: list[tuple[str, dict[str, Any]]]) -> None:
    """Validate the options stage by stage (without loading any task), so an error names the
    argument that caused it: ``tools.wiki_search.top_k=abc`` is an error of ``options``."""
    import gymnasium as gym

    from coa_envs.config import build_config, deep_merge
    from coa_envs.registry import check_id, entry

    try:
        check_id(env_id)
    except gym.error.Error as exc:
        raise RunSetupError(str(exc), "env_id") from None
    so_far: dict[str, Any] = {}
    for argument, given in stages:
        so_far = deep_merge(so_far, given)
        try:
            build_config(entry(env_id), so_far)
        except ValueError as exc:
            raise RunSetupError(str(exc), argument) from None


def env_tasks(env_id: str, *, split: str, data: str | None, max_turns: int | None,
              protocol: str | None = None, env_url: str | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[Any]]:
    """The ``gym.make`` options of a run (``options``, then split, data, turn limit, protocol)
    and the tasks they give; a bad id, option, split or data file raises :class:`RunSetupError`
    naming the argument."""
    import gymnasium as gym

    from coa_envs.tasks import DataNotFoundError
    from coa_envs.tasks.split import SplitError

    stages = [("options", dict(options or {})), ("max_turns", {"max_turns": max_turns}),
              ("protocol", {"protocol": protocol})]
    stages = [(argument, given) for argument, given in stages if None not in given.values()]
    if not env_url:  # a served env is checked by its server
        _check_options(env_id, stages)
    make_kwargs: dict[str, Any] = {}
    for _, given in stages:
        make_kwargs.update(given)
    make_kwargs["task_options"] = {**dict(make_kwargs.get("task_options") or {}), "split": split}
    if data:
        make_kwargs["data_path"] = data
    try:
        probe = env_factory(env_id, make_kwargs, env_url)()
    except gym.error.Error as exc:
        raise RunSetupError(str(exc), "env_id") from None
    except SplitError as exc:  # split=train on a test set, or a split that does not exist
        raise RunSetupError(str(exc), "split") from None
    except DataNotFoundError as exc:  # no data, or not where data points: the fix is data
        raise RunSetupError(str(exc), "data") from None
    except RuntimeError as exc:  # the env server refused (unknown id, override) or is unreachable
        raise RunSetupError(str(exc), "env_url") from None
    except (ValueError, UserError) as exc:  # a malformed data file, a loader option
        raise RunSetupError(str(exc), "data" if data else "env_id") from None
    tasks = list(probe.unwrapped.tasks)
    probe.close()
    return make_kwargs, tasks


def split_description(env_id: str, split: str, make_kwargs: dict[str, Any]) -> str:
    """What ``split`` means for this env's data, for the summary: ``test (test set: every
    task)`` or ``test (held-out 20% of a pool)``."""
    from coa_envs.registry import entry
    from coa_envs.tasks.split import TEST_SET_NOTE

    try:
        note = importlib.import_module(f"coa_envs.tasks.{entry(env_id)['family']}").SPLIT_NOTE
    except (ImportError, AttributeError, KeyError):
        return split
    pool = bool(dict(make_kwargs.get("task_options") or {}).get("pool"))
    if note == TEST_SET_NOTE and not pool:
        return f"{split} (test set: every task)"
    side = {"test": "held-out 20%", "train": "training 80%", "all": "every task"}.get(split, split)
    return f"{split} ({side} of a pool)"


def _sort_file(path: Path, order: dict[tuple[str, int], int], latest: list[Any]) -> None:
    """Rewrite the streamed JSONL in task/sample order (atomically), for stable diffs, with
    the ``latest`` version of each episode (its group terms scored) in place of the streamed one."""
    from agents.trajectory import read_trajectories, write_trajectory

    newest = {(t.task_id, t.sample_index): t for t in latest}
    records = sorted((newest.get((t.task_id, t.sample_index), t) for t in read_trajectories(path)),
                     key=lambda t: (order.get((t.task_id, t.sample_index), 1 << 30), t.sample_index))
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for trajectory in records:
            write_trajectory(handle, trajectory)
    os.replace(tmp, path)


def play_tasks(env_id: str, make_kwargs: dict[str, Any], factory: Callable[[Any, int], Any], tasks: list[Any], *,
               indices: list[int], samples: int, out: Path, make_env: Callable[[], Any] | None = None,
               **rollout_kwargs: Any) -> Any:
    """Play ``samples`` episodes of each task in ``indices``, streaming them to ``out``; then
    score the reward's group terms over each task's samples (:mod:`agents.group_rewards`) and
    rewrite ``out`` in task/sample order. Returns the :class:`~agents.rollout.RolloutResult`."""
    from agents.group_rewards import score_groups
    from agents.metrics import group_by_task
    from agents.rollout import run_rollouts
    from coa_envs.config import build_config
    from coa_envs.registry import entry
    from coa_envs.rewards import build_reward

    result = run_rollouts(make_env or env_factory(env_id, make_kwargs), factory, task_indices=indices,
                          samples=samples, out=out, **rollout_kwargs)
    reward = build_reward(build_config(entry(env_id), make_kwargs).reward)
    by_id = {t.task_id: t for t in tasks}
    score_groups(group_by_task(result.trajectories).values(), reward, by_id.get)
    reward.close()
    order = {(tasks[i].task_id, k): i for i in indices for k in range(samples)}
    _sort_file(out, order, result.trajectories)
    return result
