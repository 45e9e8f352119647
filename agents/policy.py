"""``LLMPolicy``: an :class:`agents.base.Agent` that asks an :class:`~agents.engines.Engine`.

One CoA episode is *one* assistant message that grows: the model writes a turn, stops at
a closing tool tag, the env's observation is appended to the same message, and the model
continues. The policy therefore keeps the running context as token ids (prompt ids from
the chat template, then each turn's ids exactly as sampled, then each observation's ids
from tokenising that observation *by itself*), and never re-tokenises the concatenation:
with merges that span tag joins that would silently change the ids and the loss mask.

Engines that report no token ids (a hosted API) get text instead: the rendered prompt plus
the response so far (completions endpoints) or the chat messages plus the assistant prefix
(chat endpoints); the trajectory is then text-only and trainers tokenise per segment.

In an env with ``protocol: tools`` (native function calling) each reply is its own
assistant message: the prompt is the chat template with the env's tool definitions, a turn
ends at the model's end-of-turn token, the reply's tool calls are read from the sampled
text (:mod:`agents.toolcalls`) and handed to the env as the message's JSON, and each
observation segment is the template text that carries the tool results into the next turn,
encoded by itself. Sampled ids stay as sampled, so the episode stays token-exact with its
loss mask. A ``chat``-mode HTTP engine instead sends ``tools`` and takes the server's
``tool_calls`` (text-only trajectory).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from agents.engines import Completion, Engine, EngineErrorKind, GenerationRequest, SamplingParams
from agents.trajectory import Segment, Trajectory
from coa_envs.prompts import render_system_prompt  # re-exported: policies swap prompts with it

__all__ = ["EngineError", "LLMPolicy", "render_system_prompt"]


class EngineError(RuntimeError):
    """The engine returned no usable completion; ``kind`` is an :class:`EngineErrorKind`."""

    def __init__(self, kind: EngineErrorKind | str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = str(kind)


class LLMPolicy:
    """Chat-template prompt -> engine -> one CoA turn; records a token-exact episode.

    ``tokenizer`` defaults to ``engine.tokenizer`` (local engines). ``system_prompt``
    (prompt name or text) replaces the env's system message when given. ``seed`` makes
    an episode reproducible: turn ``t`` samples with seed ``seed * 1000 + t``.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any | None = None,
        *,
        sampling: SamplingParams | None = None,
        system_prompt: str | None = None,
        seed: int | None = None,
    ):
        self.engine = engine
        self.tokenizer = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)
        self.sampling = sampling or SamplingParams()
        self.system_prompt = system_prompt
        self.seed = seed
        self.last_completion: Completion | None = None
        self._messages: list[dict[str, str]] = []
        self.prompt_text = ""
        self.prompt_ids: list[int] = []
        self.segments: list[Segment] = []
        self._context_ids: list[int] = []
        self._exact = False
        self._turn = 0
        self._tools: tuple[dict[str, Any], ...] = ()  # the env's function definitions (tools protocol)

    def fork(self, seed: int | None = None) -> LLMPolicy:
        """A fresh policy sharing the engine and settings (one per concurrent episode)."""
        return LLMPolicy(self.engine, self.tokenizer, sampling=self.sampling,
                         system_prompt=self.system_prompt, seed=seed)

    # -- Agent protocol -------------------------------------------------------------------
    def reset(self, observation: str, info: dict[str, Any]) -> None:
        self.end_episode()  # a policy reused for a new episode lets go of the last one
        messages = [dict(m) for m in info.get("messages") or []]
        if not messages:
            messages = [{"role": "user", "content": observation}]
        if self.system_prompt is not None:
            system = render_system_prompt(self.system_prompt, list(info.get("tools") or []))
            if messages[0].get("role") == "system":
                messages[0]["content"] = system
            else:
                messages.insert(0, {"role": "system", "content": system})
        self._messages = messages
        self.segments = []
        self.last_completion = None
        self._turn = 0
        self._tools = tuple(info.get("tool_schemas") or ()) if info.get("protocol") == "tools" else ()
        if self.tokenizer is not None and self._chat_tools:
            self.prompt_text, self.prompt_ids = "", []  # the server renders; ids are its business
        elif self.tokenizer is not None:
            if self._tools:
                from agents.toolcalls import render_prompt

                self.prompt_text = render_prompt(self.tokenizer, messages, self._tools)
            else:
                self.prompt_text = self.tokenizer.apply_chat_template(
                    messages, tokenize=False, add_generation_prompt=True)
            self.prompt_ids = self._encode(self.prompt_text)
        else:
            self.prompt_text, self.prompt_ids = "", []
        self._context_ids = list(self.prompt_ids)
        self._exact = bool(self.prompt_ids)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self._turn > 0 and observation:
            self.observe(observation)
        self._turn += 1
        params = self.sampling
        if self.seed is not None:
            params = dataclasses.replace(params, seed=self.seed * 1000 + self._turn)
        if self._tools:  # a reply ends at the end-of-turn token, never at a CoA tag
            params = dataclasses.replace(params, stop=())
        completion = self.engine.generate([self.request(params)], params)[0]
        self.last_completion = completion
        if not completion.ok:
            raise EngineError(completion.error_kind or EngineErrorKind.INTERNAL, completion.error)
        self.record(completion)
        if self._tools:
            return json.dumps(self._reply(completion), ensure_ascii=False)
        return completion.action_text

    @property
    def _chat_tools(self) -> bool:
        """Function calling through a chat endpoint: the server renders and parses."""
        return bool(self._tools) and getattr(self.engine, "mode", None) == "chat"

    def _reply(self, completion: Completion) -> dict[str, Any]:
        """The assistant message of a tools-protocol turn, kept in the chat history."""
        from agents.toolcalls import parse_reply, wire_message

        if completion.tool_calls or self._chat_tools or self.tokenizer is None:
            message = {"role": "assistant", "content": completion.text or None}
            if completion.tool_calls:
                message["tool_calls"] = [dict(c) for c in completion.tool_calls]
        else:
            prefix = self.prompt_text + "".join(s.text for s in self.segments[:-1])
            message = wire_message(parse_reply(self.tokenizer, completion.text, prefix, self._tools,
                                               call_prefix=f"call_{self._turn}"))
        self._messages.append(message)
        return message

    def end_episode(self) -> None:
        """The episode is over: the engine may drop what it kept to continue this context
        (the ``hf`` engine's cached keys/values). Idempotent."""
        release = getattr(self.engine, "release", None)
        if callable(release) and self._context_ids:
            release(tuple(self._context_ids))
        self._context_ids = []

    # -- pieces the rollout runner drives directly (batched turns) -----------------------
    def observe(self, observation: str) -> None:
        """Append an env observation: tokenised alone, never merged with its neighbours.
        In the tools protocol the observation is the env's tool messages (JSON); what the
        model sees is the template text that carries them into the next turn."""
        if self._tools:
            results = json.loads(observation) if observation else []
            reply = self._messages[-1]
            self._messages.extend(results)
            if self.tokenizer is not None and not self._chat_tools:
                from agents.toolcalls import observation_text

                observation = observation_text(self.tokenizer, self._messages[:-len(results) - 1] if results
                                               else self._messages[:-1], reply, results, self._tools)
        ids = self._encode(observation) if self._exact else []
        self.segments.append(Segment("observation", observation, ids))
        self._context_ids.extend(ids)

    def request(self, params: SamplingParams | None = None) -> GenerationRequest:
        """The engine request for the next turn, from the context recorded so far."""
        prefix = "".join(s.text for s in self.segments)
        return GenerationRequest(
            token_ids=tuple(self._context_ids) if self.token_exact else (),
            text=self.prompt_text + prefix,
            messages=tuple(self._messages),
            prefix="" if self._chat_tools else prefix,
            params=params,
            tools=self._tools if self._chat_tools else (),
        )

    def record(self, completion: Completion) -> None:
        """Append a turn exactly as sampled (the full decoded text, which may run a few
        characters past the stop string when the last token spans it)."""
        if self.token_exact and completion.token_ids:
            self.segments.append(Segment("generated", completion.text,
                                         list(completion.token_ids), list(completion.logprobs)))
            self._context_ids.extend(completion.token_ids)
        else:
            # No ids from the engine: keep what the env saw, so the text history is exact.
            self.segments.append(Segment("generated", completion.action_text, [],
                                         list(completion.logprobs)))
            self._exact, self._context_ids = False, []

    @property
    def token_exact(self) -> bool:
        """Whether the context is still a faithful token list (ids from every turn)."""
        return self._exact

    def fill_trajectory(self, trajectory: Trajectory) -> None:
        """Replace ``trajectory``'s text-only prompt and segments with the recorded ones.

        The episode loop records what the env saw; the policy recorded what the model saw
        (token ids, full sampled text). The env's last observation after a truncation never
        reached :meth:`act`, so it is taken from the loop's record and tokenised here.
        """
        loop_segments = trajectory.segments
        if loop_segments and loop_segments[-1].kind == "observation":
            final = loop_segments[-1].text
            seen = sum(1 for s in self.segments if s.kind == "observation")
            if seen < sum(1 for s in loop_segments if s.kind == "observation"):
                self.observe(final)
        trajectory.prompt_text = self.prompt_text or trajectory.prompt_text
        trajectory.prompt_ids = list(self.prompt_ids) if self.token_exact else []
        trajectory.segments = [
            Segment(s.kind, s.text, list(s.token_ids) if self.token_exact else [],
                    list(s.logprobs))
            for s in self.segments
        ]

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))
