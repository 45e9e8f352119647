"""Build one episode's team on smolagents' managed agents, every contribution logged to the bridge.

Shape: a manager (``ToolCallingAgent``) plans (its planning steps) and delegates one
sub-question at a time to tool agents (managed ``ToolCallingAgent`` members), each acting only
through some of the env's tools (:func:`agents.adapters.smol.env_tools`, whose ``forward`` goes
through the bridge into ``env.step``). After every delegated step the reflector reviews the
member's report, and the manager reads report and reflection together. A final answer passes
the verifier first (smolagents' ``final_answer_checks``): a rejection is an error the manager
sees and must act on, which is the team's error-correction loop.

Every agent has its own model (one OpenAI-compatible endpoint per role). A thin wrapper around
each model (:func:`agents.adapters.smol.observed_model`) logs what the model wrote: a reply
offered tools is a thought (``<think>``), a planning step is a ``<plan>``. Parallel tool calls are run one at a time
(``max_tool_threads=1``) so the env sees them in a fixed order.
"""

from __future__ import annotations

import importlib.resources
from collections import Counter
from typing import Any

from agents.teachers.bridge import TeacherBridge
from agents.teachers.config import EndpointConfig, TeacherSystemConfig, ToolAgentConfig
from agents.teachers.roles import Reflector, Verifier

__all__ = ["ANSWER_FORMATS", "Team", "build_team", "endpoint_model"]

# What the final answer must look like, by the env's prompt family (the env's own prompt says
# the same to a single model; the team never sees that prompt, which is about CoA tags).
ANSWER_FORMATS = {
    "qa": "only the short answer (a name, place, date or number), no sentence",
    "web": "only the short answer (a name, place, date or number), no sentence",
    "math": "the final result in \\boxed{...}",
    "code": ("the complete Python program in a ```python fenced block (for stdin tasks read standard "
             "input and print to standard output; for function tasks complete the starter code)"),
}
_MEMBER_TASK = (
    "You are {{name}}, a member of a research team. Your manager asks:\n{{task}}\n\n"
    "Use your tools to find out. Then call final_answer with a short report: what you found and "
    "the evidence for it (or that you could not find it)."
)
_REPORT = "Report from {{name}}:\n{{final_answer}}"


def endpoint_model(endpoint: EndpointConfig, seed: int | None = None) -> Any:
    """The framework's OpenAI-compatible model for one endpoint."""
    from smolagents import OpenAIServerModel

    extra: dict[str, Any] = {"temperature": endpoint.temperature, "max_tokens": endpoint.max_tokens}
    if endpoint.send_seed and seed is not None:
        extra["seed"] = seed

    class TextToolCallsModel(OpenAIServerModel):
        """Never sends ``tools``: the agent parses its call from the reply (``parse_tool_calls``)."""

        def generate(self, messages: list[Any], stop_sequences: list[str] | None = None,
                     response_format: dict[str, str] | None = None, tools_to_call_from: Any = None,
                     **kwargs: Any) -> Any:
            return super().generate(messages, stop_sequences, response_format, None, **kwargs)

    model_class = OpenAIServerModel if endpoint.native_tools else TextToolCallsModel
    return model_class(
        model_id=endpoint.model, api_base=endpoint.base_url, api_key=endpoint.api_key,
        client_kwargs={"timeout": endpoint.timeout_s, "max_retries": endpoint.max_retries}, **extra)


class _Usage:
    """Calls and tokens per agent, for the run's record."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = {}

    def add(self, agent: str, reply: Any) -> None:
        counter = self.counts.setdefault(agent, Counter())
        counter["calls"] += 1
        usage = getattr(reply, "token_usage", None)
        if usage is not None:
            counter["input_tokens"] += int(usage.input_tokens or 0)
            counter["output_tokens"] += int(usage.output_tokens or 0)

    def error(self, agent: str) -> None:
        self.counts.setdefault(agent, Counter())["errors"] += 1

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {agent: dict(counter) for agent, counter in sorted(self.counts.items())}


def _recording(model: Any, bridge: TeacherBridge, agent: str, usage: _Usage) -> Any:
    """The agent's model, its calls counted and what it writes logged: a reply offered tools is
    a thought, a planning step a plan (the last-resort answer after max_steps is the answer)."""
    from agents.adapters.smol import observed_model

    def on_reply(kind: str, text: str) -> None:
        if kind == "think":
            bridge.thought(agent, text)
        elif kind == "plan":
            bridge.note(agent, "plan", text)

    return observed_model(_CountedModel(model, agent, usage), on_reply)


def _templates(member: bool) -> dict[str, Any]:
    import yaml

    text = importlib.resources.files("smolagents.prompts").joinpath("toolcalling_agent.yaml").read_text()
    templates = yaml.safe_load(text)
    if member:
        templates["managed_agent"] = {"task": _MEMBER_TASK, "report": _REPORT}
    return templates


class Team:
    """One episode's agents. ``run()`` solves the task and returns the final answer text."""

    def __init__(self, manager: Any, members: list[Any], task: str, usage: _Usage):
        self.manager, self.members, self.task, self.usage = manager, members, task, usage
        self.rejections = 0
        self.verdicts: list[str] = []
        self.verify: Any = None  # the verifier's check, when the system has one

    def run(self) -> tuple[str, bool]:
        """``(final answer, fallback)``; ``fallback`` when the manager ran out of steps and the
        framework wrote the answer from its memory. The framework skips the answer checks on
        that path, so the verifier still double-checks it here, for the record only (there are
        no steps left to act on a rejection)."""
        from smolagents.utils import AgentMaxStepsError

        final = self.manager.run(self.task)
        steps = getattr(self.manager.memory, "steps", [])
        fallback = bool(steps) and isinstance(getattr(steps[-1], "error", None), AgentMaxStepsError)
        answer = str(final if final is not None else "").strip()
        if fallback and self.verify is not None:
            self.verify(answer, binding=False)
        return answer, fallback

    def interrupt(self) -> None:
        for agent in (self.manager, *self.members):
            agent.interrupt()


def _member_class(bridge: TeacherBridge, question: str, reflector: Reflector | None, usage: _Usage) -> type:
    from smolagents import ToolCallingAgent
    from smolagents.agents import populate_template

    class Member(ToolCallingAgent):
        """A tool agent whose report is logged and reviewed by the reflector before the manager reads it."""

        def __call__(self, task: str, **kwargs: Any) -> str:
            bridge.acted("manager")
            bridge.note("manager", "think", task, source="delegation", member=self.name)
            full_task = populate_template(self.prompt_templates["managed_agent"]["task"],
                                          variables={"name": self.name, "task": task})
            report = str(self.run(full_task, **kwargs) or "").strip()
            bridge.acted(self.name)
            bridge.note(self.name, "think", report, source="report")
            answer = populate_template(self.prompt_templates["managed_agent"]["report"],
                                       variables={"name": self.name, "final_answer": report})
            if reflector is not None:
                try:
                    reflection = reflector.reflect(question, self.name, task, report)
                except Exception:  # a failing reviewer costs its review (counted), not the episode
                    reflection = ""
                bridge.note("reflector", "reflection", reflection)
                if reflection:
                    answer += f"\n\nReflection from the reviewer:\n{reflection}"
            return answer

    return Member


def _verify_check(bridge: TeacherBridge, question: str, verifier: Verifier, max_rejections: int,
                  team: Team) -> Any:
    def verify_final_answer(final_answer: Any, memory: Any = None, agent: Any = None, *,
                            binding: bool = True) -> bool:
        answer = str(final_answer).strip()
        bridge.acted("manager")
        bridge.note("manager", "suggested_answer", answer)
        try:
            verdict = verifier.check(question, answer, list(bridge.observations))
        except Exception:  # an unreachable verifier lets the answer through (its error is counted)
            return True
        team.verdicts.append(verdict.decision)
        bridge.note("verifier", "double_check", verdict.text, verdict=verdict.decision)
        if binding and verdict.rejected and team.rejections < max_rejections:
            team.rejections += 1
            reason = verdict.text.rsplit("VERDICT", 1)[0].strip() or "it is not supported by the evidence"
            raise ValueError(f"the verifier rejected the answer {answer!r}: {reason}\n"
                             "Investigate further (delegate another step if needed), then give a corrected "
                             "final answer.")
        return True

    return verify_final_answer


def build_team(system: TeacherSystemConfig, env: Any, bridge: TeacherBridge, question: str, *,
               seed: int | None = None) -> Team:
    """The manager, the members the env's tools allow, the reflector and the verifier."""
    from smolagents import ToolCallingAgent
    from smolagents.monitoring import LogLevel

    from agents.adapters.smol import env_tools

    config = env.unwrapped.config
    usage = _Usage()
    reflector = (Reflector(_CountedModel(endpoint_model(system.reflector.endpoint, seed), "reflector", usage),
                           system.reflector.instructions) if system.reflector.enabled else None)
    member_class = _member_class(bridge, question, reflector, usage)
    members = [_member(member_class, spec, env, bridge, usage, seed, env_tools)
               for spec in system.agents_for(list(config.tools))]
    budget = max(0, config.max_turns - 1)
    answer_format = ANSWER_FORMATS.get(config.prompt, ANSWER_FORMATS["qa"])
    task = (f"{question}\n\nYour team may make at most {budget} tool calls in total. "
            f"Give the final answer as {answer_format}.")
    manager = ToolCallingAgent(
        tools=[], model=_recording(endpoint_model(system.manager.endpoint, seed), bridge, "manager", usage),
        managed_agents=members, max_steps=system.manager.max_steps,
        planning_interval=system.manager.planning_interval or None, instructions=system.manager.instructions or None,
        prompt_templates=_templates(member=False), max_tool_threads=1, verbosity_level=LogLevel.OFF,
        name="manager")
    team = Team(manager, members, task, usage)
    if system.verifier.enabled:
        verifier = Verifier(_CountedModel(endpoint_model(system.verifier.endpoint, seed), "verifier", usage),
                            system.verifier.instructions, system.verifier.evidence_chars)
        team.verify = _verify_check(bridge, question, verifier, system.verifier.max_rejections, team)
        manager.final_answer_checks = [team.verify]
    return team


def _member(member_class: type, spec: ToolAgentConfig, env: Any, bridge: TeacherBridge, usage: _Usage,
            seed: int | None, env_tools: Any) -> Any:
    from smolagents.monitoring import LogLevel

    bound = _BoundBridge(bridge, spec.name)
    tools = [tool for tool in env_tools(env, bound) if tool.name in spec.tools]
    return member_class(
        tools=tools, model=_recording(endpoint_model(spec.endpoint, seed), bridge, spec.name, usage),
        max_steps=spec.max_steps, name=spec.name, description=spec.description,
        instructions=spec.instructions or None, prompt_templates=_templates(member=True),
        max_tool_threads=1, verbosity_level=LogLevel.OFF)


class _BoundBridge:
    """The bridge as one member's tools see it: calls are logged under that member's name."""

    def __init__(self, bridge: TeacherBridge, agent: str):
        self.bridge, self.agent = bridge, agent

    def call(self, tag: str, query: str) -> str:
        return self.bridge.call(self.agent, tag, query)


class _CountedModel:
    """A model whose calls, tokens and failures are counted for the run's record."""

    def __init__(self, model: Any, agent: str, usage: _Usage):
        self.model, self.agent, self.usage = model, agent, usage

    def __getattr__(self, name: str) -> Any:  # model_id, parse_tool_calls, ...: the model's own
        return getattr(self.model, name)

    def generate(self, messages: list[Any], **kwargs: Any) -> Any:
        try:
            reply = self.model.generate(messages, **kwargs)
        except Exception:
            self.usage.error(self.agent)
            raise
        self.usage.add(self.agent, reply)
        return reply
