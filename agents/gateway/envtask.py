"""A coa env episode behind a gateway session: the task an external agent is given, its
tools, and the env's reward for the agent's final answer.

``POST /sessions {env_id, task_id}`` opens one: the env is reset on that task and the agent
gets the question (and the env's own prompt messages and tool definitions, should it want
them). Tool calls go through ``env.step`` as the env's protocol writes them, so turn limits,
the tool cache, error kinds and tool statistics are the env's; the final answer is one more
step, which ends the episode and scores it with the env's reward. What the model wrote is
the gateway's record, not the env's: the env sees only the tool calls and the answer.

Outcome bookkeeping (status, reward, answer, tool counts, reward details) is
:class:`agents.episode.EpisodeRecorder`'s, the same as every other episode loop's.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from agents.episode import EpisodeRecorder
from agents.trajectory import EpisodeStatus, Trajectory

__all__ = ["EnvTask", "ToolCallError"]

_OBS_OPEN, _OBS_CLOSE = "\n<observation>\n", "\n</observation>\n\n"
_EPISODE_OVER = "The episode is over; give your final answer now."


class ToolCallError(ValueError):
    """A tool call the env cannot take (unknown tool, bad arguments); the message says why."""


class EnvTask:
    """One reset env playing one task. Thread-safe: one step at a time."""

    def __init__(self, env: Any, env_id: str, *, seed: int | None = None, options: dict[str, Any] | None = None,
                 sample_index: int = 0, extra_info: dict[str, Any] | None = None) -> None:
        self.env = env
        self.env_id = env_id
        prompt, info = env.reset(seed=seed, options=options)
        self.recorder = EpisodeRecorder.start(env_id, prompt, info, seed=seed, sample_index=sample_index,
                                              extra_info=extra_info)
        unwrapped = env.unwrapped
        self.task_id: str = info["task_id"]
        self.question: str = unwrapped.task.question
        self.messages: list[dict[str, str]] = list(info.get("messages") or [])
        self.max_turns = int(info.get("max_turns") or 0)
        self.protocol: str = info.get("protocol", "tags")
        self.definitions: dict[str, dict[str, Any]] = dict(unwrapped.tool_definitions)
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self.recorder.done

    def describe(self) -> dict[str, Any]:
        """What the agent is told: the question, the env's prompt and its tools (OpenAI shape)."""
        from coa_envs.protocols.tools import openai_tools

        return {"env_id": self.env_id, "task_id": self.task_id, "question": self.question,
                "messages": self.messages, "tools": openai_tools(self.definitions.values()),
                "max_turns": self.max_turns}

    def call_tool(self, name: str, arguments: Any) -> str:
        """Run one tool call as an env step; returns the tool's text (the env's corrections
        included). Raises :class:`ToolCallError` for a call that never reaches the env."""
        from coa_envs.protocols.tools import ToolArgumentError, arguments_to_query, query_to_arguments

        definition = self.definitions.get(name)
        if definition is None:
            raise ToolCallError(f"no tool {name!r}; this task has {sorted(self.definitions)}")
        try:
            query = arguments_to_query(definition, arguments)
        except ToolArgumentError as exc:
            raise ToolCallError(str(exc)) from None
        if self.protocol != "tools" and (f"</{name}>" in query or "<answer>" in query):
            # Inside the tag protocol these would close the call early and smuggle in an answer.
            raise ToolCallError(f"the {name} input may not contain </{name}> or <answer>")
        with self._lock:
            if self.done:
                return _EPISODE_OVER
            if self.protocol == "tools":
                call = {"id": "call_0", "type": "function",
                        "function": {"name": name, "arguments": json.dumps(query_to_arguments(definition, query))}}
                observation = self._step({"role": "assistant", "content": "", "tool_calls": [call]})
            else:
                observation = self._step(f"<{name}>{query}</{name}>")
        return _tool_text(observation, self.protocol) + (f"\n({_EPISODE_OVER})" if self.done else "")

    def finish(self, answer: str | None) -> None:
        """Submit the final answer (the env scores it); None ends the episode unanswered."""
        with self._lock:
            if self.done:
                return
            if answer is None:
                self.recorder.end(EpisodeStatus.TRUNCATED_UNKNOWN, error="the agent ended without an answer")
                return
            text = answer.replace("<answer>", "").replace("</answer>", "").strip() or "(no answer)"
            action: Any = text if self.protocol == "tools" else f"<answer>{text}</answer>"
            observation = self._step(action)
            if not self.done:  # the env refused the answer as written (a malformed action)
                self.recorder.end(EpisodeStatus.TRUNCATED_UNKNOWN,
                                  error=f"the env did not accept the answer: {observation.strip()[:300]}")

    def end(self, status: EpisodeStatus, error: str | None = None) -> None:
        with self._lock:
            self.recorder.end(status, error=error)

    def _step(self, action: Any) -> str:
        try:
            observation, reward, terminated, truncated, info = self.env.step(action)
        except Exception as exc:  # envs should not raise; if one does, the episode ends here
            self.recorder.end(EpisodeStatus.ERROR_ENV, error=exc)
            return f"The tool failed: {type(exc).__name__}"
        self.recorder.step(observation, reward, terminated, truncated, info)
        return observation

    def outcome(self) -> Trajectory:
        """The env's record of the episode (status, reward, answer, tool counts, details);
        its segments are the env's view and are not used by the gateway."""
        return self.recorder.finish() if self.done else self.recorder.trajectory


def _tool_text(observation: str, protocol: str) -> str:
    if protocol == "tools":
        try:
            messages = json.loads(observation)
            return "\n\n".join(str(m.get("content", "")) for m in messages)
        except (json.JSONDecodeError, AttributeError, TypeError):
            return observation
    if observation.startswith(_OBS_OPEN) and observation.endswith(_OBS_CLOSE):
        return observation[len(_OBS_OPEN):-len(_OBS_CLOSE)]
    return observation
