"""A smolagents ``ToolCallingAgent``, trained through the gateway without changing it.

The agent is smolagents' own: its prompts, its memory, its function-calling loop, its final
answer step. Only its model's ``api_base`` points at a gateway session, and the env's tools
are wrapped as smolagents ``Tool`` objects that call the session's tool endpoint:

    coa train rl --config examples/rl_gateway_smolagents.yaml

smolagents sends tools on every call, so the served chat template must render them (the
tiny model's does; for SmolLM2, whose template does not, the config sets
``rollout.agent_chat_template: chatml-tools``). smolagents rewrites its history between calls
(tool calls become text), so a session is several token-exact segments, one per call: the
gateway records that (``info["gateway"]["layout"] == "split"``) instead of re-tokenising.
"""

from __future__ import annotations

import inspect
from typing import Any

from agents.gateway.client import AgentTask


def env_tool(task: AgentTask, spec: dict[str, Any]) -> Any:
    """A smolagents ``Tool`` for one of the task's tools (OpenAI ``tools`` entry)."""
    from smolagents import Tool

    function = spec["function"]
    parameters = function["parameters"]["properties"]
    inputs = {name: {"type": "string", "description": p.get("description", name)} for name, p in parameters.items()}

    def forward(self: Any, **arguments: str) -> str:
        return task.call_tool(function["name"], arguments)

    # smolagents checks that forward's signature names exactly the declared inputs.
    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=str) for name in inputs)])
    cls = type(f"Env_{function['name']}", (Tool,), {
        "name": function["name"], "description": function["description"], "inputs": inputs,
        "output_type": "string", "forward": forward})
    return cls()


def smolagents_agent(task: AgentTask, max_steps: int = 3, max_tokens: int = 128) -> str | None:
    """Let a smolagents ToolCallingAgent answer ``task.question`` with the env's tools."""
    from smolagents import OpenAIServerModel, ToolCallingAgent
    from smolagents.monitoring import LogLevel

    model = OpenAIServerModel(model_id=task.model, api_base=task.base_url, api_key=task.api_key,
                              client_kwargs={"max_retries": 0}, max_tokens=max_tokens)
    agent = ToolCallingAgent(tools=[env_tool(task, spec) for spec in task.tools], model=model,
                             max_steps=max_steps, verbosity_level=LogLevel.OFF)
    answer = agent.run(task.question)
    return None if answer is None else str(answer)


if __name__ == "__main__":  # one episode against a running gateway: coa gateway MODEL --port 8300
    import json

    from agents.gateway.client import open_task

    episode = open_task("http://127.0.0.1:8300", env_id="coa/SynthHop-v1", task_index=0)
    answer = smolagents_agent(episode)
    print(json.dumps({"answer": answer, **episode.finish(answer)}, indent=2))
