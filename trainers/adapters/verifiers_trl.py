"""Train on a verifiers environment with TRL's ``GRPOTrainer`` (its ``rollout_func`` hook).

verifiers (v1) runs episodes against an OpenAI-compatible endpoint and records them as
traces; it ships no trainer of its own for CPU use. :class:`VerifiersRollout` closes the
loop: on every TRL step it serves the trainer's *live* model on loopback with ``coa
serve``'s app (so each episode samples from the current weights), runs the verifiers
episodes of the batch's prompts (:mod:`trainers.adapters.verifiers_env`, a coa env as
the user), and turns each trace into a TRL row: the chat template rendered message by
message, each message's tokens encoded on their own, model turns trained on
(``env_mask`` 1) and everything the env or the template wrote masked (0). The reward is the
``coa_reward`` the env recorded on the trace.

Unlike :class:`~trainers.adapters.trl_grpo.CoARollout`, the ids are re-encoded from the
trace's messages (verifiers' eval client records messages, not sampled ids), so the
sampled logprobs are unknown (sent as 0; TRL recomputes its own); the CoA path through
``CoARollout`` stays token-exact.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from typing import Any

from trainers.adapters.trl_grpo import coa_env_reward

__all__ = ["VerifiersRollout", "trace_tokens"]

_KEY_VAR = "COA_VERIFIERS_LOCAL_KEY"  # verifiers reads the API key from a variable; loopback needs none


class VerifiersRollout:
    """A TRL ``rollout_func`` over a :class:`~trainers.adapters.verifiers_env.CoAVerifiersEnv`.

    ``env_config`` is its :class:`~trainers.adapters.verifiers_env.CoAEnvConfig`;
    ``concurrency`` bounds episodes in flight.
    """

    def __init__(self, env_config: Any, *, concurrency: int = 8, model_name: str = "policy"):
        from trainers.adapters.verifiers_env import CoAVerifiersEnv

        self.env = CoAVerifiersEnv(env_config)
        self.tasks = list(self.env.taskset)
        self._task_of_prompt = {_key(_messages(t.data)): t for t in self.tasks}
        self.concurrency, self.model_name = concurrency, model_name
        self.last_episodes: list[Any] = []
        self.reward = coa_env_reward  # reads the coa_reward field this rollout fills
        self.__name__ = "verifiers_rollout"

    def dataset(self) -> Any:
        """One conversational ``prompt`` per task of the taskset (plus ``task_id``)."""
        from datasets import Dataset

        return Dataset.from_list([{"prompt": _messages(t.data), "task_id": t.data.info["task_id"]}
                                  for t in self.tasks])

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list]:
        import verifiers.v1 as vf

        from agents.engines.hf import HFEngine
        from agents.server import create_app, serve_in_thread

        tasks = []
        for prompt in prompts:
            task = self._task_of_prompt.get(_key(list(prompt)))
            if task is None:
                raise KeyError("a prompt that VerifiersRollout.dataset() did not produce")
            tasks.append(task)
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        tokenizer = trainer.processing_class
        engine = HFEngine(model, tokenizer, device=str(model.device), dtype="auto",
                          max_batch_size=max(1, min(self.concurrency, len(tasks))))
        os.environ.setdefault(_KEY_VAR, "loopback")
        sampling = vf.SamplingConfig(temperature=float(trainer.temperature), top_p=float(trainer.top_p))
        try:
            with serve_in_thread(create_app(engine, tokenizer, self.model_name)) as url:
                context = vf.ModelContext(model=self.model_name, sampling=sampling,
                                          client=vf.EvalClientConfig(base_url=url, api_key_var=_KEY_VAR))
                episodes = asyncio.run(self._episodes(tasks, context))
        finally:
            model.train(was_training)
        self.last_episodes = episodes
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                "coa_reward": []}
        for episode in episodes:
            trace = episode.traces[-1] if episode.traces else None
            messages = _plain(trace.branches[-1].messages) if trace is not None and trace.branches else []
            prompt_ids, completion_ids, mask = trace_tokens(messages, tokenizer)
            reward = trace.rewards.get("coa_reward") if trace is not None else None
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion_ids)
            out["logprobs"].append([0.0] * len(completion_ids))
            out["env_mask"].append(mask)
            out["coa_reward"].append(float(reward.score) if reward is not None else 0.0)
        return out

    async def _episodes(self, tasks: list[Any], context: Any) -> list[Any]:
        gate = asyncio.Semaphore(self.concurrency)

        async def one(task: Any) -> Any:
            async with gate:
                return await self.env.run_episode(task, context)

        async with self.env.serving():
            return list(await asyncio.gather(*(one(t) for t in tasks)))


def _messages(data: Any) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    return [*messages, {"role": "user", "content": data.prompt}]


def _plain(messages: Sequence[Any]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content or ""} for m in messages]


def _key(messages: Any) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def trace_tokens(messages: list[dict[str, str]], tokenizer: Any) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, completion ids, env mask) of a chat: the template rendered up to each
    message, every message's added text encoded by itself (so the mask is exact at each
    boundary), assistant additions trained on, the rest masked."""

    def render(upto: int, generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(messages[:upto], tokenize=False, add_generation_prompt=generation_prompt)

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    prompt_text = render(first, True)
    completion: list[int] = []
    mask: list[int] = []
    rendered = prompt_text
    for index in range(first, len(messages)):
        assistant = messages[index]["role"] == "assistant"
        following = index + 1 < len(messages) and messages[index + 1]["role"] == "assistant"
        text = render(index + 1, not assistant or following)
        # A template that rewrites history cannot be diffed: then the message alone is encoded.
        added = text[len(rendered):] if text.startswith(rendered) else messages[index]["content"]
        ids = encode(added)
        completion += ids
        mask += [1 if assistant else 0] * len(ids)
        rendered = text
    if not completion:  # no model turn at all: one masked eos keeps the row valid and loss-free
        completion, mask = [int(tokenizer.eos_token_id)], [0]
    return encode(prompt_text), completion, mask
