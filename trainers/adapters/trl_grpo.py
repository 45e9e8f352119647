"""TRL's ``GRPOTrainer`` on coa envs, through its multi-turn rollout hook.

TRL (1.x) lets a ``rollout_func(prompts, trainer)`` replace its own generation: the function
returns each rollout's prompt ids, completion ids and sampled logprobs, plus optionally an
``env_mask`` (1 = the model's token, 0 = the environment's: no loss) and extra fields that
TRL forwards to the reward functions. :class:`CoARollout` is that function for any coa id:
each prompt becomes a whole multi-turn CoA episode, played by the trainer's current model
through our ``hf`` engine and :class:`~agents.policy.LLMPolicy` in the real env (tools
included, local or served by ``coa serve-env``), recorded token-exactly. The completion is
every turn and observation of the episode in order; ``env_mask`` is the trajectory's loss
mask; the reward is the env's, handed to TRL by :func:`coa_env_reward` (``rollout.reward``).

    rollout = CoARollout("coa/SynthHop-v1", env_kwargs={...})
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=rollout.dataset(),
                          reward_funcs=rollout.reward, rollout_func=rollout)

The group samples of one prompt get distinct sampling seeds derived from the trainer's step,
so a run is reproducible. ``trl``, ``datasets`` and ``torch`` are imported lazily.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from agents.trajectory import Trajectory

__all__ = ["CoARollout", "coa_env_reward"]


class _PooledEnv(gym.Wrapper):
    """An env handed to the rollout runner that goes back to the pool when "closed"."""

    def __init__(self, env: gym.Env, pool: list[gym.Env], lock: threading.Lock):
        super().__init__(env)
        self._pool, self._lock = pool, lock

    def close(self) -> None:
        with self._lock:
            self._pool.append(self.env)


class CoARollout:
    """A TRL ``rollout_func`` (and its dataset and reward function) for one coa env id.

    ``env_kwargs`` are ``gym.make`` overrides (``task_options: {split: train}`` is added
    unless given); with ``env_url`` the env is stepped in a ``coa serve-env`` server.
    ``max_new_tokens`` bounds one model turn; ``max_tool_calls`` and ``episode_timeout_s``
    end runaway episodes as :func:`agents.rollout.run_rollouts` does.
    """

    def __init__(
        self,
        env_id: str,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        env_url: str | None = None,
        max_new_tokens: int = 128,
        max_tool_calls: int = 8,
        concurrency: int = 8,
        episode_timeout_s: float = 600.0,
        seed: int = 0,
    ):
        kwargs = dict(env_kwargs or {})
        kwargs["task_options"] = {"split": "train", **dict(kwargs.get("task_options") or {})}
        self.env_id, self.env_kwargs, self.env_url = env_id, kwargs, env_url
        self.max_new_tokens, self.max_tool_calls = max_new_tokens, max_tool_calls
        self.concurrency, self.episode_timeout_s, self.seed = concurrency, episode_timeout_s, seed
        self._pool: list[gym.Env] = []
        self._lock = threading.Lock()
        self._task_of_prompt: dict[str, int] = {}
        self.last_trajectories: list[Trajectory] = []
        self.reward = coa_env_reward
        self.__name__ = "coa_rollout"  # TRL logs functions by name

    # -- envs ------------------------------------------------------------------------------
    def _new_env(self) -> gym.Env:
        import coa_envs  # noqa: F401  (registers the ids)

        if self.env_url:
            from coa_envs.registry import REMOTE_ID

            return gym.make(REMOTE_ID, base_url=self.env_url, env_id=self.env_id, overrides=self.env_kwargs)
        return gym.make(self.env_id, **self.env_kwargs)

    def _env(self) -> gym.Env:
        with self._lock:
            env = self._pool.pop() if self._pool else None
        return _PooledEnv(env if env is not None else self._new_env(), self._pool, self._lock)

    def close(self) -> None:
        with self._lock:
            envs, self._pool = self._pool, []
        for env in envs:
            env.close()

    # -- what TRL is given -----------------------------------------------------------------
    def dataset(self, limit: int | None = None) -> Any:
        """A ``datasets.Dataset`` with one conversational ``prompt`` per task (the env's own
        system and user messages) plus ``task_id`` and ``task_index``."""
        from datasets import Dataset

        env = self._env()
        try:
            count = len(env.unwrapped.tasks) if limit is None else min(limit, len(env.unwrapped.tasks))
            rows = []
            for index in range(count):
                _, info = env.reset(seed=self.seed, options={"task_index": index})
                messages = [dict(m) for m in info["messages"]]
                self._task_of_prompt[_key(messages)] = index
                rows.append({"prompt": messages, "task_id": info["task_id"], "task_index": index})
        finally:
            env.close()
        return Dataset.from_list(rows)

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list]:
        from agents.engines import SamplingParams
        from agents.engines.hf import HFEngine
        from agents.policy import LLMPolicy
        from agents.rollout import policy_factory, run_rollouts

        indices = [self._index_of(prompt) for prompt in prompts]
        wanted: dict[int, int] = defaultdict(int)
        for index in indices:
            wanted[index] += 1
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        tokenizer = trainer.processing_class
        engine = HFEngine(model, tokenizer, device=str(model.device), dtype="auto",
                          max_batch_size=max(1, min(self.concurrency, len(prompts))))
        sampling = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=float(trainer.temperature),
                                  top_p=float(trainer.top_p), top_k=int(trainer.top_k or 0))
        factory, close = policy_factory(LLMPolicy(engine, sampling=sampling))
        step = int(trainer.state.global_step)
        try:
            result = run_rollouts(self._env, factory, task_indices=list(wanted), samples=max(wanted.values()),
                                  concurrency=self.concurrency, seed=self.seed * 1_000_003 + step,
                                  episode_timeout_s=self.episode_timeout_s, max_tool_calls=self.max_tool_calls)
        finally:
            close()
            model.train(was_training)
        by_task: dict[str, list[Trajectory]] = defaultdict(list)
        for trajectory in sorted(result.trajectories, key=lambda t: t.sample_index):
            by_task[trajectory.task_id].append(trajectory)
        env_task_ids = self._task_ids()
        taken: dict[int, int] = defaultdict(int)
        ordered: list[Trajectory] = []
        for index in indices:
            ordered.append(by_task[env_task_ids[index]][taken[index]])
            taken[index] += 1
        self.last_trajectories = ordered
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                "coa_reward": [], "coa_status": [], "coa_turns": []}
        for prompt, trajectory in zip(prompts, ordered, strict=True):
            prompt_ids, completion_ids, logprobs, mask = _token_record(trajectory, prompt, tokenizer)
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion_ids)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(mask)
            out["coa_reward"].append(float(trajectory.reward))
            out["coa_status"].append(str(trajectory.status))
            out["coa_turns"].append(trajectory.num_turns)
        return out

    # -- helpers -----------------------------------------------------------------------------
    def _index_of(self, prompt: Any) -> int:
        key = _key(prompt)
        if key not in self._task_of_prompt:
            raise KeyError("a prompt that CoARollout.dataset() did not produce; build the trainer's "
                           "train_dataset with rollout.dataset() so each prompt maps to its task")
        return self._task_of_prompt[key]

    def _task_ids(self) -> list[str]:
        env = self._env()
        try:
            return [t.task_id for t in env.unwrapped.tasks]
        finally:
            env.close()


def coa_env_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """TRL reward function: each episode's reward as the coa env gave it (the rollout
    forwards it in the ``coa_reward`` field)."""
    return [float(r) for r in kwargs["coa_reward"]]


def _key(messages: Any) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def _token_record(trajectory: Trajectory, prompt: Any, tokenizer: Any) -> tuple[list[int], list[int], list[float],
                                                                                   list[int]]:
    """(prompt ids, completion ids, sampled logprobs, env mask) of one episode.

    TRL counts a completion whose last token is not eos (or pad) as *truncated*
    (``completions/clipped_ratio``; ``mask_truncated_completions`` drops it from the loss). A
    CoA episode the env ended (an answer) stops at ``</answer>``, a stop string, not at eos, so
    every episode read as truncated (clipped_ratio 1, mean_terminated_length 0). An episode the
    env terminated therefore ends with one eos token, mask 0 and logprob 0 (not sampled, never
    trained); an episode cut by a limit keeps its last token and is truncated for TRL too.

    An episode that produced no token-exact record (the engine failed before the first
    turn, or the env could not start) still needs a row: one eos token with mask 0, so it
    adds nothing to the loss, while its reward (0) keeps the group's statistics honest.
    """
    if trajectory.has_token_ids and trajectory.response_ids():
        completion, logprobs, mask = trajectory.response_ids(), trajectory.sampled_logprobs(), trajectory.loss_mask()
        eos = int(tokenizer.eos_token_id)
        if trajectory.terminated and completion[-1] != eos:
            completion, logprobs, mask = [*completion, eos], [*logprobs, 0.0], [*mask, 0]
        return list(trajectory.prompt_ids), completion, logprobs, mask
    prompt_ids = list(tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=True,
                                                    return_dict=False))
    return prompt_ids, [int(tokenizer.eos_token_id)], [0.0], [0]
