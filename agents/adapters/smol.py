"""Let a smolagents agent drive a coa env: env tools become smolagents ``Tool`` objects.

Why smolagents and not the OpenAI Agents SDK: ``pip install openai-agents`` installs a
top-level package named ``agents``, which would shadow (or be shadowed by) this
project's ``agents`` package depending on ``sys.path`` order. smolagents lives under its
own name, so both can be installed side by side. (This module is ``smol``, not
``smolagents``, for the same reason.)

How it works: every tool of the env (``wiki_search``, ``web_search``, ``code``…) is exposed
as a smolagents tool whose ``forward(query)`` sends the CoA action ``<tag>query</tag>``
through ``env.step`` (so turn limits, caching, error kinds and statistics are the env's),
and the framework's final answer is submitted as ``<answer>…</answer>``. The episode is
recorded as an ordinary :class:`~agents.trajectory.Trajectory` in CoA format, so runs of a
framework agent can be scored, compared and distilled into SFT data (``coa distill``). What
the framework's model wrote around its calls becomes CoA role spans: a planning step's text
a ``<plan>``, the text before a tool call a ``<think>``, placed before the call they led to
(text that would not parse as a clean role span is left out and counted).

Pointing it at a model::

    from smolagents import OpenAIServerModel
    model = OpenAIServerModel(model_id="tiny", api_base="http://127.0.0.1:8000/v1",
                              api_key="EMPTY")   # `coa serve`, vLLM, or a hosted API
    trajectory = run_smolagents_episode(gym.make("coa/SynthHop-v1"), model)

``oracle_tool_model(task)`` is a deterministic smolagents ``Model`` that replays a task's
scripted solution as tool calls; it exists to show the wiring end to end without a model
able to solve the task.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agents.episode import EpisodeRecorder
from agents.trajectory import EpisodeStatus, Trajectory

__all__ = ["answer_action", "env_tools", "observed_model", "oracle_tool_model", "run_smolagents_episode"]

_OPEN = "\n<observation>\n"
_CLOSE = "\n</observation>\n\n"


class _EnvBridge:
    """Routes tool calls and the final answer through ``env.step`` and records them."""

    def __init__(self, env: Any, recorder: EpisodeRecorder):
        self.env, self.recorder = env, recorder
        self.pending: list[tuple[str, str]] = []  # (role, span) written since the last call
        self.dropped_notes = 0
        self._lock = threading.Lock()  # parallel tool calls run in threads
        self._step_lock = threading.Lock()  # ...but one env steps one action at a time

    @property
    def done(self) -> bool:
        return self.recorder.done

    def note(self, role: str, text: str) -> None:
        """Keep the model's ``text`` as a ``<role>`` span of the next action, if it parses clean."""
        from coa_envs.protocol import parse_turn

        span = f"<{role}>{text.strip()}</{role}>"
        parsed = parse_turn(f"{span}\n<answer>-</answer>")  # a role span alone is no action
        with self._lock:
            if text.strip() and parsed.ok and len(parsed.roles) == 1 and parsed.answer == "-":
                self.pending.append((role, span))
            elif text.strip():
                self.dropped_notes += 1

    def new_reply(self) -> None:
        """A reply that offers tools starts: a thought whose call never reached the env (it did
        not parse) belongs to no action; a plan stays for the action it plans."""
        with self._lock:
            stale = [note for note in self.pending if note[0] == "think"]
            self.pending = [note for note in self.pending if note[0] != "think"]
            self.dropped_notes += len(stale)

    def _with_notes(self, action: str) -> str:
        from coa_envs.protocol import MAX_TURN_CHARS

        with self._lock:
            notes, self.pending = [span for _, span in self.pending], []
        joined = "\n".join([*notes, action])
        if notes and len(joined) > MAX_TURN_CHARS:  # the notes must never cost the action
            self.dropped_notes += len(notes)
            return action
        return joined

    def step(self, action: str) -> tuple[str, dict[str, Any]]:
        action = self._with_notes(action)
        with self._step_lock:
            observation, reward, terminated, truncated, info = self.env.step(action)
            self.recorder.generated(action)
            self.recorder.step(observation, reward, terminated, truncated, info)
            self.recorder.observation(observation)
        return observation, info

    def call(self, tag: str, query: str) -> str:
        if self.done:
            return "The episode is over; give your final answer now."
        observation, _ = self.step(f"<{tag}>{query}</{tag}>")
        text = observation
        if text.startswith(_OPEN) and text.endswith(_CLOSE):
            text = text[len(_OPEN):-len(_CLOSE)]
        if self.done:
            text += "\n(The tool budget is used up; give your final answer now.)"
        return text

    def answer(self, text: str) -> None:
        if not self.done:
            self.step(answer_action(text, tuple(getattr(self.env.unwrapped.config, "tools", ()))))


def answer_action(text: str, tool_tags: tuple[str, ...] = ()) -> str:
    """The framework's final answer as one well-formed ``<answer>`` action.

    The answer is the framework's free text, and a model may write protocol markup into it (a
    ``<think>`` it never closed, an ``</answer>`` of its own). Sent as it is, that is a malformed
    action: the env answers with a protocol error, the framework has already stopped, and the
    episode ends unanswered (``error:agent``) although the agent answered. So the protocol's own
    tags are taken out of the text (other markup such as ``<b>`` is an answer's to keep), text no
    model can send (lone surrogates) is replaced and the length is capped; what is left is scored
    as the answer, and an answer left empty is ``(no answer)``. ``tool_tags``: the env's tool tags
    beyond the registered ones (an env's MCP tools), which its parser reads as tags too.
    """
    import re

    from coa_envs.protocol import MAX_TURN_CHARS, parse_turn
    from coa_envs.vocabulary import coa_tags

    tags = re.compile(r"</?(?:" + "|".join(map(re.escape, {*coa_tags(), *tool_tags})) + r")>")
    clean = tags.sub(" ", text).encode("utf-8", "replace").decode("utf-8").strip()
    action = f"<answer>{clean[:MAX_TURN_CHARS - 64].strip() or '(no answer)'}</answer>"
    return action if parse_turn(action, extra_tools=tool_tags).ok else "<answer>(no answer)</answer>"


def env_tools(env: Any, bridge: _EnvBridge) -> list[Any]:
    """One smolagents ``Tool`` per env tool, each calling ``env.step`` through ``bridge``."""
    from smolagents import Tool

    from coa_envs.tools import tool_spec

    tools = []
    for tag in env.unwrapped.config.tools:
        spec = tool_spec(tag)

        # smolagents validates that forward's parameters are exactly the declared inputs.
        def make_forward(t: str) -> Any:
            def forward(self: Any, query: str) -> str:
                return bridge.call(t, query)
            return forward

        cls = type(f"CoA_{tag}", (Tool,), {
            "name": tag,
            "description": spec.summary,
            "inputs": {"query": {"type": "string", "description": spec.argument}},
            "output_type": "string",
            "forward": make_forward(tag),
        })
        tools.append(cls())
    return tools


def observed_model(model: Any, on_reply: Callable[[str, str], None],
                   on_request: Callable[[], None] | None = None) -> Any:
    """Wrap a smolagents ``Model`` so the text of each reply reaches ``on_reply(kind, text)``.

    ``kind`` is ``think`` for a reply that was offered tools (the text before the call; a
    call written as text, ``Action: {...}``, is cut off), ``plan`` for a planning step (the
    framework asks for one with the ``<end_plan>`` stop sequence; the marker is cut off, for
    servers that ignore stop sequences) and ``final`` for the framework's last-resort answer
    after ``max_steps``. ``on_request`` runs before each reply that is offered tools. Used by
    this adapter and by the teacher teams of :mod:`agents.teachers`.
    """
    from smolagents.models import Model

    class ObservedModel(Model):
        def __init__(self) -> None:
            super().__init__(model_id=getattr(model, "model_id", None))

        def __getattr__(self, name: str) -> Any:  # everything else is the wrapped model's
            return getattr(model, name)

        def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                     tools_to_call_from: Any = None, **kwargs: Any) -> Any:
            if tools_to_call_from is not None and on_request is not None:
                on_request()
            reply = model.generate(messages, stop_sequences=stop_sequences, response_format=response_format,
                                   tools_to_call_from=tools_to_call_from, **kwargs)
            text = reply.content if isinstance(reply.content, str) else ""
            if tools_to_call_from is not None:
                on_reply("think", text if reply.tool_calls else text.split("Action:")[0])
            elif stop_sequences and "<end_plan>" in stop_sequences:
                on_reply("plan", text.split("<end_plan>")[0])
            else:
                on_reply("final", text)
            return reply

        def parse_tool_calls(self, message: Any) -> Any:
            return model.parse_tool_calls(message)

    return ObservedModel()


def _noting_model(model: Any, bridge: _EnvBridge) -> Any:
    """The model whose thoughts and plans become role spans of the next action (the
    last-resort answer is the answer itself, not a role)."""

    def on_reply(kind: str, text: str) -> None:
        if kind in ("think", "plan"):
            bridge.note(kind, text)

    return observed_model(model, on_reply, on_request=bridge.new_reply)


def run_smolagents_episode(
    env: Any,
    model: Any,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    max_steps: int | None = None,
    agent_kwargs: dict[str, Any] | None = None,
) -> Trajectory:
    """Reset ``env``, let a smolagents ``ToolCallingAgent`` over ``model`` solve the task
    with the env's tools, submit its final answer, and return the CoA trajectory."""
    from smolagents import ToolCallingAgent
    from smolagents.monitoring import LogLevel

    _, info = env.reset(seed=seed, options=options)
    messages = info.get("messages", [])
    question = messages[-1]["content"] if messages else ""
    recorder = EpisodeRecorder.start(env.unwrapped.config.env_id, question, info, seed=seed,
                                     extra_info={"framework": "smolagents"})
    bridge = _EnvBridge(env, recorder)
    agent = ToolCallingAgent(tools=env_tools(env, bridge), model=_noting_model(model, bridge),
                             max_steps=max_steps or int(info.get("max_turns") or 8),
                             verbosity_level=LogLevel.OFF, **(agent_kwargs or {}))
    try:
        final = agent.run(question)
        bridge.answer(str(final).strip() or "(no answer)")
    except Exception as exc:  # the framework failed; the env record so far stays valid
        recorder.end(EpisodeStatus.ERROR_AGENT, error=exc)
    recorder.trajectory.info["framework_steps"] = len(getattr(agent.memory, "steps", []))
    recorder.trajectory.info["dropped_notes"] = bridge.dropped_notes
    return recorder.finish()


def oracle_tool_model(task: Any) -> Any:
    """A deterministic smolagents ``Model`` replaying ``task.metadata["oracle_actions"]``
    (CoA action strings) as tool calls, then ``final_answer``. For demos and tests only."""
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
        Model,
    )

    from coa_envs.protocol import parse_turn

    script: list[tuple[str, dict[str, str]]] = []
    for action in task.metadata.get("oracle_actions") or []:
        parsed = parse_turn(action)
        for call in parsed.tool_calls:
            script.append((call.tool, {"query": call.query}))
        if parsed.answer is not None:
            script.append(("final_answer", {"answer": parsed.answer}))
    if not script:
        script = [("final_answer", {"answer": task.gold[0] if task.gold else ""})]

    class OracleToolModel(Model):
        def __init__(self) -> None:
            super().__init__(model_id="oracle-script")
            self.step = 0

        def generate(self, messages: list[Any], stop_sequences: Any = None,
                     response_format: Any = None, tools_to_call_from: Any = None,
                     **kwargs: Any) -> Any:
            name, arguments = script[min(self.step, len(script) - 1)]
            self.step += 1
            call = ChatMessageToolCall(
                id=f"call_{self.step}", type="function",
                function=ChatMessageToolCallFunction(name=name, arguments=arguments))
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])

    return OracleToolModel()
