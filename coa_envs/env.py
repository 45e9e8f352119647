"""``CoAEnv``: one Gymnasium text env for every CoA task family.

The env owns the loop the seed spread over scripts: render the prompt, parse each model
turn with :mod:`coa_envs.protocol`, run the one tool call it names, append the observation,
and score the final answer. Nothing a model writes can crash it: malformed turns, unknown
tools, failing tools and failing rewards all become observations or ``info`` fields.
The env knows no policy and no trainer.
"""

from __future__ import annotations

import logging
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from coa_envs.config import EnvConfig
from coa_envs.env_resources import EnvResources, held
from coa_envs.prompts import render_system_prompt
from coa_envs.protocol import ParsedTurn, ToolCall, parse_turn, render_observation
from coa_envs.protocols import corrective_message
from coa_envs.rewards import EpisodeView, ToolCallRecord, build_reward
from coa_envs.rewards.compose import term_errors
from coa_envs.spaces import TextSpace
from coa_envs.tasks import load_family_tasks, open_family_runtime
from coa_envs.tools import build_tools, run_tool
from coa_envs.types import ErrorKind, Reward, Task, Tool, ToolContext, ToolResult

__all__ = ["CoAEnv", "TextSpace", "corrective_message"]

log = logging.getLogger(__name__)

_REPEAT_MESSAGE = (
    "You already made this exact {tool} call; its result is above. "
    "Use a different query or give your answer."
)


class CoAEnv(gym.Env[str, str]):
    """A multi-turn text environment. See ``envs_registry.yaml`` for the registered ids."""

    metadata = {"render_modes": ["ansi"]}
    _tools = held("tools")
    _mcp = held("mcp")
    _reward = held("reward")
    _runtime = held("runtime")

    def __init__(self, config: EnvConfig):
        self.config = config
        self.render_mode = config.render_mode
        budget = config.context_budget_chars or 1_000_000
        self.observation_space = TextSpace(max_length=max(budget, 1_000_000))
        self.action_space = TextSpace(max_length=max(budget, 1_000_000))
        self._res = EnvResources()
        self._finalizer = weakref.finalize(self, self._res.close)  # on GC and at interpreter exit
        self.config, self._runtime = open_family_runtime(config)
        try:
            self.tasks: list[Task] = load_family_tasks(config.family, self.config.tasks)
            # Built now, not at the first call: a setting only a constructor can check (an index
            # that must exist, a backend that needs base_url) fails make, not every tool call.
            self._tools = build_tools(self.config.tools)
        except BaseException:
            self.close()
            raise
        self._task_index = {t.task_id: i for i, t in enumerate(self.tasks)}
        self._definitions: dict[str, dict[str, Any]] | None = None
        self._token_counter: Any = None
        self.task: Task | None = None
        self._reset_episode_state()

    # what wrappers and users ask for (``env.get_wrapper_attr("max_turns")``)
    env_id = property(lambda self: self.config.env_id)
    max_turns = property(lambda self: self.config.max_turns, doc="model turns before truncation")

    # -- lazily built resources (dropped on pickling, rebuilt on demand) -----------------
    @property
    def mcp_tools(self) -> dict[str, Any]:
        """Tools of the configured MCP servers (``mcp_servers``), by the names the env gives them."""
        if self._mcp is None:
            if not self.config.mcp_servers:
                self._mcp = {}
            else:
                from coa_envs.mcp.client import open_mcp_tools

                self._mcp = open_mcp_tools(self.config.mcp_servers, taken=list(self.config.tools))
        return self._mcp

    @property
    def tool_names(self) -> list[str]:
        """Every tool this env offers: its configured tools, then its MCP servers' tools."""
        return [*self.config.tools, *self.mcp_tools]

    @property
    def tool_definitions(self) -> dict[str, dict[str, Any]]:
        """Each tool as a JSON-schema function (the ``tools`` protocol's and MCP's view)."""
        if self._definitions is None:
            from coa_envs.protocols.tools import function_definition

            self._definitions = {**{name: function_definition(name) for name in self.config.tools},
                                 **{name: tool.definition for name, tool in self.mcp_tools.items()}}
        return self._definitions

    @property
    def tools(self) -> dict[str, Tool]:
        """The configured tools (built at make, rebuilt after unpickling), then the MCP ones."""
        if self._tools is None:
            self._tools = build_tools(self.config.tools)
        if self.config.mcp_servers and not set(self.mcp_tools) <= set(self._tools):
            self._tools.update(self.mcp_tools)
        return self._tools

    @property
    def reward_fn(self) -> Reward:
        if self._reward is None:
            self._reward = build_reward(self.config.reward)
        return self._reward

    def _reset_episode_state(self) -> None:
        self.turn = 0
        self.done = False
        self.history_chars = 0
        self.history_tokens = 0
        self.asked: set[tuple[str, str]] = set()
        self.prompt_text = ""
        # After the prompt, in order: ("generated", turn) and ("observation", text) as the
        # model saw them; with the tool-call log, what episode reward terms read.
        self.segments: list[tuple[str, str]] = []
        self.tool_log: list[ToolCallRecord] = []
        self.ctx = ToolContext(task=self.task, episode_id="")

    # -- prompt ---------------------------------------------------------------------------
    def system_prompt(self) -> str:
        if self.config.system_prompt is not None:
            return self.config.system_prompt
        if self.config.protocol == "tools":  # the tools travel as function definitions, not as text
            return render_system_prompt(f"{self.config.prompt}_tools", [])
        from coa_envs.mcp.client import tag_specs

        return render_system_prompt(self.config.prompt, [*self.config.tools, *tag_specs(self.mcp_tools)])


    def messages(self, task: Task) -> list[dict[str, str]]:
        user = task.question
        if task.files:
            names = ", ".join(f.rsplit("/", 1)[-1] for f in task.files)
            user += f"\n\nAttached files: {names}"
        return [{"role": "system", "content": self.system_prompt()}, {"role": "user", "content": user}]

    # -- Gymnasium API --------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        self._release_episode_tools()
        if "task_id" in options:
            if options["task_id"] not in self._task_index:
                raise KeyError(f"task_id {options['task_id']!r} is not in {self.config.env_id}")
            index = self._task_index[options["task_id"]]
        elif "task_index" in options:
            index = int(options["task_index"]) % len(self.tasks)
        else:
            index = int(self.np_random.integers(len(self.tasks)))
        self.task = self.tasks[index]
        self._reset_episode_state()
        self.ctx = ToolContext(task=self.task, episode_id=f"{self.config.env_id}:{self.task.task_id}")
        messages = self.messages(self.task)
        prompt = f"{messages[0]['content']}\n\n{messages[1]['content']}"
        self._count(prompt)
        self.prompt_text = prompt
        info = {
            "task_id": self.task.task_id,
            "messages": messages,
            "tools": self.tool_names,
            "max_turns": self.config.max_turns,
            "protocol": self.config.protocol,
        }
        if self.config.protocol == "tools":
            from coa_envs.protocols.tools import openai_tools

            info["tool_schemas"] = openai_tools(self.tool_definitions.values())
        if isinstance(self.task.tests, dict) and "cases" in self.task.tests:  # public: the statement's examples
            from coa_envs.tasks.code import count_tests
            info["tests"] = count_tests(self.task.tests)
        return prompt, info

    def step(self, action: str):
        # ``tool`` is always a list (empty, one, or parallel calls); ``tool_error_kinds`` is
        # aligned with it (None for a call that went fine); ``error_kind`` is the step's first.
        info: dict[str, Any] = {"turn": self.turn + 1, "tool": [], "tool_error_kinds": [],
                                "tool_latency_s": 0.0, "error_kind": None, "answer": None,
                                "reward_details": None}
        tools_protocol = self.config.protocol == "tools"
        if self.task is None or self.done:
            info["error_kind"] = ErrorKind.BAD_ACTION.value
            info["action_error"] = "the episode is over; call reset()"
            return self._render_text("The episode is over."), 0.0, True, False, info
        self.turn += 1
        call_ids: tuple[str, ...] = ()
        call_errors: tuple[str | None, ...] = ()
        if tools_protocol:
            from coa_envs.protocols.tools import parse_message

            parsed, call_ids, call_errors, action_text = parse_message(
                action, self.tool_definitions, allow_parallel=self.config.allow_parallel_tools)
        else:
            parsed = parse_turn(action, allow_parallel=self.config.allow_parallel_tools,
                                extra_tools=tuple(self.mcp_tools))
            action_text = action if isinstance(action, str) else ""
        self._count(action_text)
        if action_text:
            self.segments.append(("generated", action_text))
        reward, terminated = 0.0, False
        texts: list[str] = []
        if parsed.error is not None:
            info["error_kind"] = ErrorKind.BAD_ACTION.value
            info["protocol_error"] = parsed.error.kind.value
            info["action_error"] = parsed.error.message
            corrective = corrective_message(parsed.error.kind.value, parsed.error.message, self.tool_names,
                                            self.config.protocol)
            texts = [corrective] * max(1, len(call_ids))
        elif parsed.answer is not None:
            reward, terminated = self._score(parsed, info)
        else:
            texts = [r.text for r in self._run_tools(parsed, info, call_errors)]

        if terminated:
            self.done = True
            observation = ""
        else:
            observation = self._render(parsed, call_ids, texts)
            self._count(observation)
            self.segments.append(("observation", observation))
        truncated = False
        if not terminated:
            if self.turn >= self.config.max_turns:
                truncated, info["truncation"] = True, "max_turns"
            elif self._over_budget():
                truncated, info["truncation"] = True, "context_budget"
            if truncated:
                self.done = True
        return observation, reward, terminated, truncated, info

    def _render(self, parsed: ParsedTurn, call_ids: tuple[str, ...], texts: list[str]) -> str:
        """The observation in the env's protocol: one ``<observation>`` span (parallel calls
        headed by tool and number), or one ``tool`` message per call id."""
        texts = [self._cut(t) for t in texts]
        if self.config.protocol == "tools":
            from coa_envs.protocols.tools import render_tool_messages

            return render_tool_messages(call_ids, [c.tool for c in parsed.tool_calls], texts)
        if len(texts) > 1:
            pairs = enumerate(zip(parsed.tool_calls, texts, strict=True))
            return render_observation("\n\n".join(f"[{call.tool} #{i + 1}]\n{text}" for i, (call, text) in pairs))
        return render_observation(texts[0] if texts else "")

    def _render_text(self, text: str) -> str:
        """A message from the env that answers no call (an episode-level note)."""
        if self.config.protocol == "tools":
            from coa_envs.protocols.tools import render_tool_messages

            return render_tool_messages((), (), [text])
        return render_observation(text)

    # -- helpers --------------------------------------------------------------------------
    def _score(self, parsed: ParsedTurn, info: dict[str, Any]) -> tuple[float, bool]:
        assert self.task is not None and parsed.answer is not None
        info["answer"] = parsed.answer
        if parsed.tool_calls:
            info["ignored_tool_calls"] = [c.tool for c in parsed.tool_calls]
        reward = self.reward_fn
        score_episode = getattr(reward, "score_episode", None)
        try:
            if score_episode is None:  # a plain Reward callable set by hand: it sees the answer
                result = reward(parsed.answer, self.task)
            else:
                result = score_episode(EpisodeView(task=self.task, answer=parsed.answer,
                                                   segments=tuple(self.segments), tool_calls=tuple(self.tool_log)))
            info["reward_details"] = dict(result.details)
        except Exception as exc:
            log.exception("reward %s failed on task %s", self.config.reward, self.task.task_id)
            info["reward_error"] = f"{type(exc).__name__}: {exc}"
            info["error_kind"] = ErrorKind.REWARD_ERROR.value
            return 0.0, True
        failed = term_errors(result.details)
        if failed:  # the failed terms scored 0; the others count (see coa_envs/rewards/compose.py)
            info["reward_error"] = failed
            info["error_kind"] = ErrorKind.REWARD_ERROR.value
        return float(result.score), True

    def _run_tools(self, parsed: ParsedTurn, info: dict[str, Any],
                   refused: tuple[str | None, ...] = ()) -> list[ToolResult]:
        """Run the turn's calls (several concurrently); a call in ``refused`` (its arguments
        failed the schema) gets its message instead of running."""
        calls = parsed.tool_calls
        info["tool"] = [c.tool for c in calls]
        started = time.perf_counter()
        if len(calls) == 1 and not any(refused):  # the common case, kept lean: most of the step overhead
            results = [self._call_tool(calls[0])]
        else:
            reasons = refused or (None,) * len(calls)

            def one(pair: tuple[ToolCall, str | None]) -> ToolResult:
                call, reason = pair
                return ToolResult.failure(reason, ErrorKind.BAD_ACTION) if reason else self._call_tool(call)

            with ThreadPoolExecutor(max_workers=len(calls)) as pool:
                results = list(pool.map(one, zip(calls, reasons, strict=True)))
        info["tool_latency_s"] = time.perf_counter() - started
        kinds = [None if r.error_kind is None else r.error_kind.value for r in results]
        self.tool_log.extend(ToolCallRecord(c.tool, c.query, k) for c, k in zip(calls, kinds, strict=True))
        info["tool_error_kinds"] = kinds
        info["error_kind"] = next((k for k in kinds if k is not None), None)
        info["tool_result_details"] = [dict(r.details) for r in results]
        return results

    def _call_tool(self, call: ToolCall) -> ToolResult:
        if call.tool not in self.config.tools and call.tool not in self.mcp_tools:
            available = ", ".join(self.tool_names) or "none"
            return ToolResult.failure(
                f"The tool <{call.tool}> is not available in this task. Available tools: {available}.",
                ErrorKind.TOOL_NOT_AVAILABLE,
            )
        key = (call.tool, " ".join(call.query.split()))
        if key in self.asked:
            return ToolResult.failure(_REPEAT_MESSAGE.format(tool=call.tool), ErrorKind.REPEATED_QUERY)
        self.asked.add(key)
        return run_tool(self.tools, call.tool, call.query, self.ctx)

    def _cut(self, text: str) -> str:
        limit = self.config.max_observation_chars
        if len(text) <= limit:
            return text
        return text[:limit] + f"\n[... observation cut: {len(text) - limit} more characters]"

    def _count(self, text: str) -> None:
        self.history_chars += len(text)
        if self.config.context_budget_tokens:
            if self._token_counter is None:
                from transformers import AutoTokenizer

                self._token_counter = AutoTokenizer.from_pretrained(self.config.tokenizer)
            self.history_tokens += len(self._token_counter(text, add_special_tokens=False)["input_ids"])

    def _over_budget(self) -> bool:
        cfg = self.config
        if cfg.context_budget_chars and self.history_chars >= cfg.context_budget_chars:
            return True
        return bool(cfg.context_budget_tokens and self.history_tokens >= cfg.context_budget_tokens)

    def _release_episode_tools(self) -> None:
        """Let stateful tools drop per-episode state (e.g. a notebook session)."""
        if self._tools is None:
            return
        for tool in self._tools.values():
            release = getattr(tool, "end_episode", None)
            if callable(release):
                try:
                    release(self.ctx)
                except Exception:
                    log.exception("tool %s failed to release its episode state", tool.name)
        self.ctx.state.clear()

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self.prompt_text + "".join(text for _, text in self.segments)
        return None

    def close(self) -> None:
        if hasattr(self, "ctx"):  # not when make failed before the episode state existed
            self._release_episode_tools()
        self._res.close()
        self._definitions = None
        super().close()

    # -- pickling: resources are rebuilt on demand, episode state travels --------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # Tools, MCP connections, reward clients and the runtime are per process (the original
        # env owns the runtime; the config keeps its settings): the copy rebuilds them on demand.
        del state["_res"], state["_finalizer"]
        state["_definitions"] = None
        state["_token_counter"] = None
        state["tasks"] = None
        state["_task_index"] = None
        # Per-episode tool state (e.g. a live notebook process) cannot cross processes.
        state["ctx"] = ToolContext(task=self.ctx.task, episode_id=self.ctx.episode_id)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._res = EnvResources()
        self._finalizer = weakref.finalize(self, self._res.close)
        self.__dict__.update(state)
        self.tasks = load_family_tasks(self.config.family, self.config.tasks)
        self._task_index = {t.task_id: i for i, t in enumerate(self.tasks)}
