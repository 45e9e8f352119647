"""A verifiers (v1) environment over any coa id: taskset, env and an in-process chat harness.

verifiers loads plugins by module: ``--env.taskset.id trainers.adapters.verifiers_env``
finds the three classes this module exports. :class:`CoATaskset` yields one task per task
of the coa env (its own system prompt and question); :class:`CoAVerifiersEnv` plays an
episode the way verifiers' game envs do: the model's reply is the action, the coa env
steps host-side (tools included; locally or in a ``coa serve-env`` server), its
observation comes back as the next user turn, and the env's reward is recorded on the
trace as ``coa_reward``. :class:`CoAChatHarness` is the agent: a stateless chat loop that
runs in-process (verifiers' documented alternative to launching a program) and sends every
model call through verifiers' interception endpoint, so the trace records it; it stops at
the CoA protocol's stop strings and keeps them in the reply.

:class:`VerifiersRollout` then trains on such episodes with TRL's ``GRPOTrainer`` (its
``rollout_func`` hook): the trainer's live model is served on loopback by ``coa serve``'s
app, verifiers runs the episodes against it, and each trace becomes one training row
(messages tokenised with the chat template, model turns trained on, observations masked).
``verifiers``, ``trl`` and ``torch`` are imported lazily where possible; this module itself
needs ``verifiers`` installed (extra ``adapters``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

__all__ = ["CoAChatHarness", "CoAChatHarnessConfig", "CoAData", "CoAEnvConfig", "CoATask", "CoATaskset",
           "CoATasksetConfig", "CoAVerifiersEnv"]

PLUGIN_ID = "coa_verifiers"  # the top-level package verifiers imports this plugin by


class CoATasksetConfig(vf.TasksetConfig):
    """Which coa env, with which ``gym.make`` overrides, and which tasks."""

    id: str = PLUGIN_ID
    env_id: str = "coa/SynthHop-v1"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """gym.make overrides (``task_options``, ``tools``, ``reward``, ``max_turns``...)."""
    env_url: str | None = None
    """Step the env in a ``coa serve-env`` server at this URL instead of in-process."""
    split: str = "train"
    limit: int | None = None
    """At most this many tasks (in the env's order)."""


def make_coa_env(config: CoATasksetConfig) -> Any:
    """The gym env a taskset config names (registers the coa ids on import)."""
    import gymnasium as gym

    import coa_envs  # noqa: F401

    kwargs = dict(config.env_kwargs)
    kwargs["task_options"] = {"split": config.split, **dict(kwargs.get("task_options") or {})}
    if config.env_url:
        from coa_envs.registry import REMOTE_ID

        return gym.make(REMOTE_ID, base_url=config.env_url, env_id=config.env_id, overrides=kwargs)
    return gym.make(config.env_id, **kwargs)


class CoAData(vf.TaskData):
    info: dict
    """``env_id``, ``task_id`` and ``task_index``: what the env resets to."""


class CoATask(vf.Task[CoAData, vf.State, vf.TaskConfig]):
    pass


class CoATaskset(vf.Taskset[CoATask, CoATasksetConfig]):
    def load(self) -> Iterator[CoATask]:
        env = make_coa_env(self.config)
        try:
            count = len(env.unwrapped.tasks)
            if self.config.limit is not None:
                count = min(count, self.config.limit)
            for index in range(count):
                _, info = env.reset(seed=0, options={"task_index": index})
                messages = info["messages"]
                system = next((m["content"] for m in messages if m["role"] == "system"), None)
                user = next(m["content"] for m in messages if m["role"] == "user")
                yield CoATask(CoAData(id=info["task_id"], name=info["task_id"], prompt=user, system_prompt=system,
                                      info={"env_id": self.config.env_id, "task_id": info["task_id"],
                                            "task_index": index}),
                              self.config.task)
        finally:
            env.close()


class CoAEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())
    """The policy. Its harness (this module's chat loop) runs in-process, so the runtime
    only hosts scratch files."""


class CoAVerifiersEnv(vf.Env[CoAEnvConfig]):
    """One coa episode per verifiers episode; the coa env is the user (see the module doc)."""

    async def run(self, task: CoATask, agents: Any) -> None:
        env = await asyncio.to_thread(make_coa_env, self.taskset.config)
        reward, ending, steps = 0.0, "no_reply", 0
        try:
            await asyncio.to_thread(env.reset, seed=0, options={"task_index": task.data.info["task_index"]})
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated:
                    action = segment.last_reply
                    observation, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
                    steps += 1
                    if terminated or truncated:
                        ending = "terminated" if terminated else f"truncated:{info.get('truncation')}"
                        interaction.trace.info["coa_answer"] = info.get("answer")
                        break
                    segment = await interaction.turn(observation)
                else:
                    ending = "agent_stopped"
        finally:
            await asyncio.to_thread(env.close)
        trace = interaction.trace
        trace.record_reward("coa_reward", float(reward))
        trace.info.update({"coa_task_id": task.data.info["task_id"], "coa_steps": steps, "coa_ending": ending})


class CoAChatHarnessConfig(vf.HarnessConfig):
    id: str = PLUGIN_ID
    max_tokens: int = 256
    """Tokens per model turn (a turn also ends at a CoA stop string)."""


class CoAChatHarness(vf.Harness[CoAChatHarnessConfig]):
    """A chat loop in this process: one model call per segment, through the interception."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: Any, **_: Any) -> ProgramResult:
        import openai

        from coa_envs.protocol import STOP_STRINGS

        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m)
                         for m in prompt or []]
        client = openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        try:
            await client.chat.completions.create(
                model=ctx.model, messages=messages, max_tokens=self.config.max_tokens, stop=list(STOP_STRINGS),
                # vLLM's (and coa serve's) extension: keep the closing tag, the env needs it
                extra_body={"include_stop_str_in_output": True})
        finally:
            await client.close()
        return ProgramResult(exit_code=0, stdout="", stderr="")
