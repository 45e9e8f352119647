"""A teacher system's configuration: which model plays which agent, and how far each may go.

A system YAML names one OpenAI-compatible endpoint (an API model for real use, ``coa serve``
for local runs) that every agent uses, and lets each agent override any endpoint key, so a
strong model can verify while a cheap one searches::

    name: api-teacher
    endpoint: {base_url: https://api.openai.com/v1, model: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
    manager: {max_steps: 10, planning_interval: 4}
    tool_agents:
      - {name: web_agent, tools: [web_search, crawl_page], max_steps: 6}
      - {name: wiki_agent, tools: [wiki_search]}
      - {name: code_agent, tools: [code]}
    reflector: {enabled: true}
    verifier: {enabled: true, max_rejections: 1, endpoint: {model: gpt-4o}}

Every endpoint is resolved at load time (the system default merged under each agent's own
keys), so a loaded config holds complete endpoints and nothing is decided later.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coa_envs.configkit import ConfigError, build_section, check_fields, load_mapping
from coa_envs.vocabulary import tool_names

__all__ = [
    "DEFAULT_TOOL_AGENTS",
    "EndpointConfig",
    "ManagerConfig",
    "RoleAgentConfig",
    "SystemConfigError",
    "TeacherSystemConfig",
    "ToolAgentConfig",
    "VerifierConfig",
    "load_system",
    "system_from_dict",
]


class SystemConfigError(ConfigError):
    """A system YAML that cannot run; the message says what to change."""


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """An OpenAI-compatible chat-completions endpoint and how to sample from it."""

    base_url: str = ""
    """e.g. ``http://127.0.0.1:8000/v1`` (``coa serve``) or ``https://api.openai.com/v1``."""
    model: str = ""
    """The model name as the server knows it."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the key; when unset the key sent is ``EMPTY`` (local servers)."""
    temperature: float = 0.0
    max_tokens: int = 1024
    """Completion budget of one call."""
    timeout_s: float = 120.0
    max_retries: int = 2
    send_seed: bool = True
    """Send each episode's seed (OpenAI, vLLM and ``coa serve`` accept it) so reruns repeat."""
    native_tools: bool = True
    """Send the agents' tools as the request's ``tools`` (the server renders them and replies
    with ``tool_calls``). False: the tools are only described in the system prompt and each
    call is parsed from the reply's text, for models whose chat template does not render
    tools (``coa serve`` refuses ``tools`` for those, e.g. SmolLM2)."""

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.base_url or not self.model:
            raise SystemConfigError("an endpoint needs base_url and model (set them under `endpoint:` "
                                    "for every agent, or under the agent's own `endpoint:`)")
        if not self.base_url.startswith(("http://", "https://")):
            raise SystemConfigError(f"endpoint base_url={self.base_url!r} must start with http:// or https://")
        if self.max_tokens < 1 or self.timeout_s <= 0 or self.max_retries < 0:
            raise SystemConfigError("endpoint max_tokens must be >= 1, timeout_s > 0, max_retries >= 0")

    @property
    def api_key(self) -> str:
        return os.environ.get(self.api_key_env, "") or "EMPTY"


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    """The agent that plans, delegates to the tool agents and gives the final answer."""

    endpoint: EndpointConfig
    max_steps: int = 8
    """Manager steps (each a delegation or a final answer) before it must answer."""
    planning_interval: int = 3
    """Write a plan before step 1 and every this many steps after; 0 turns planning off."""
    instructions: str = ""
    """Extra instructions appended to the framework's manager prompt."""

    def __post_init__(self) -> None:
        check_fields(self, "manager.")


@dataclass(frozen=True, slots=True)
class ToolAgentConfig:
    """A team member acting only through some of the env's tools."""

    name: str
    tools: tuple[str, ...]
    endpoint: EndpointConfig
    description: str = ""
    """What the manager is told this member does."""
    max_steps: int = 4
    instructions: str = ""

    def __post_init__(self) -> None:
        check_fields(self, f"{self.name}.")


@dataclass(frozen=True, slots=True)
class RoleAgentConfig:
    """A role agent without tools (the reflector): one chat call per use."""

    endpoint: EndpointConfig
    enabled: bool = True
    instructions: str = ""
    """Replaces the built-in role prompt when set."""

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, slots=True)
class VerifierConfig(RoleAgentConfig):
    """Checks each suggested final answer against the evidence before it becomes final."""

    max_rejections: int = 1
    """How often it may send the manager back to work; after that its verdict is only recorded."""
    evidence_chars: int = 6000
    """How much of the tool results seen so far (the most recent) it reads."""


_DEFAULT_DESCRIPTIONS = {
    "web_agent": "searches the web and reads pages; ask it one concrete thing to find",
    "wiki_agent": "retrieves encyclopedia passages; ask it one fact at a time",
    "code_agent": "writes and runs Python; ask it to compute or to test a program",
}
DEFAULT_TOOL_AGENTS: tuple[dict[str, Any], ...] = (
    {"name": "web_agent", "tools": ["web_search", "crawl_page", "visual_inspector"], "max_steps": 6},
    {"name": "wiki_agent", "tools": ["wiki_search"]},
    {"name": "code_agent", "tools": ["code"]},
)


@dataclass(frozen=True, slots=True)
class TeacherSystemConfig:
    """The whole team. ``tool_agents`` whose tools the env lacks are left out of an episode."""

    name: str
    manager: ManagerConfig
    tool_agents: tuple[ToolAgentConfig, ...]
    reflector: RoleAgentConfig
    verifier: VerifierConfig
    step_timeout_s: float = 900.0
    """Longest wait for the team's next action (a stuck endpoint ends the episode with an error)."""
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        check_fields(self)
        names = [agent.name for agent in self.tool_agents]
        if len(set(names)) != len(names) or "manager" in names:
            raise SystemConfigError(f"tool agent names must be unique and not 'manager': {names}")
        claimed: dict[str, str] = {}
        for agent in self.tool_agents:
            if not agent.name.isidentifier():
                raise SystemConfigError(f"tool agent name {agent.name!r} must be a Python identifier")
            for tool in agent.tools:
                if tool not in tool_names():
                    raise SystemConfigError(f"{agent.name}: unknown tool {tool!r}; tools are {list(tool_names())}")
                if tool in claimed:
                    raise SystemConfigError(f"tool {tool!r} is given to both {claimed[tool]} and {agent.name}")
                claimed[tool] = agent.name
            if agent.max_steps < 1:
                raise SystemConfigError(f"{agent.name}: max_steps must be >= 1")
        if self.manager.max_steps < 1 or self.manager.planning_interval < 0:
            raise SystemConfigError("manager: max_steps must be >= 1 and planning_interval >= 0 (0 = no planning)")
        if self.verifier.max_rejections < 0 or self.verifier.evidence_chars < 0:
            raise SystemConfigError("verifier: max_rejections and evidence_chars must be >= 0")
        if self.step_timeout_s <= 0:
            raise SystemConfigError("step_timeout_s must be > 0")

    def agents_for(self, env_tools: list[str] | tuple[str, ...]) -> list[ToolAgentConfig]:
        """The members that can act in an env with ``env_tools``, each keeping only those tools."""
        members = []
        for agent in self.tool_agents:
            usable = tuple(tool for tool in agent.tools if tool in env_tools)
            if usable:
                members.append(dataclasses.replace(agent, tools=usable))
        return members


def _endpoint(section: str, default: Mapping[str, Any], own: Any) -> EndpointConfig:
    """The system's default endpoint with the agent's own keys on top, built now (resolved at
    load time: nothing is left for later to decide)."""
    if own is not None and not isinstance(own, Mapping):
        raise SystemConfigError(f"{section}.endpoint must be a mapping")
    try:
        return build_section(EndpointConfig, {**default, **(own or {})}, prefix=f"{section}.endpoint.")
    except ConfigError as error:
        raise SystemConfigError(f"{section}: {error}") from None


def _agent(section: str, data: Any, default: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise SystemConfigError(f"{section} must be a mapping")
    return {**data, "endpoint": _endpoint(section, default, data.get("endpoint"))}


def _member(index: int, raw: Any, default: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(raw, Mapping) or "name" not in raw or not raw.get("tools"):
        raise SystemConfigError(f"tool_agents[{index}] needs a name and a list of tools")
    member = {**raw, "tools": tuple(raw["tools"])}
    member.setdefault("description", _DEFAULT_DESCRIPTIONS.get(raw["name"], f"acts with {', '.join(raw['tools'])}"))
    return _agent(f"tool_agents[{index}]", member, default)


def system_from_dict(data: Mapping[str, Any], source: str = "") -> TeacherSystemConfig:
    """Build and validate a system from a parsed YAML mapping (see the module docstring)."""
    if not isinstance(data, Mapping):
        raise SystemConfigError("the system file must hold a mapping")
    values = dict(data)
    default = values.pop("endpoint", None) or {}
    if not isinstance(default, Mapping):
        raise SystemConfigError("endpoint must be a mapping")
    values["source"] = source
    values["name"] = str(values.get("name") or Path(source).stem or "teacher")
    for role in ("manager", "reflector", "verifier"):
        values[role] = _agent(role, values.get(role) or {}, default)
    values["tool_agents"] = tuple(_member(index, raw, default)
                                  for index, raw in enumerate(values.get("tool_agents") or DEFAULT_TOOL_AGENTS))
    try:
        return build_section(TeacherSystemConfig, values)
    except SystemConfigError:
        raise
    except ConfigError as error:
        raise SystemConfigError(str(error)) from None


def load_system(path: str | os.PathLike[str], **endpoint_overrides: Any) -> TeacherSystemConfig:
    """Read a system YAML. ``endpoint_overrides`` (e.g. ``base_url=…``) replace the default
    endpoint's keys, for pointing a shipped example at your own server."""
    import yaml

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"teacher system file not found: {file}")
    try:
        data = load_mapping(file)
    except yaml.YAMLError as error:
        raise SystemConfigError(f"{file}: not valid YAML: {error}") from None
    except ConfigError as error:
        raise SystemConfigError(str(error)) from None
    if endpoint_overrides:
        data = {**data, "endpoint": {**(data.get("endpoint") or {}), **endpoint_overrides}}
    return system_from_dict(data, source=str(file))
