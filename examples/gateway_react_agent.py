"""A plain ReAct loop on the official ``openai`` client, trained through the gateway.

Nothing here knows about coa-envs' tag protocol or about training: it is an ordinary agent
that asks a chat model for ``Thought / Action: tool[input] / Final Answer``, runs the tool,
and shows the model the observation. Pointed at a gateway session (``task.base_url``), every
call it makes is recorded token-exactly, and the RL loop trains the model on its runs:

    coa train rl --config examples/rl_gateway_react.yaml

``use_tools=True`` asks for native function calling instead (a model whose chat template
renders tools); the text protocol works with any chat model. Run this file to watch one
episode against a ``coa gateway`` already running on port 8300.
"""

from __future__ import annotations

import json
import re

from agents.gateway.client import AgentTask

SYSTEM = """Answer the question. You have these tools:
{tools}
Use this format:
Thought: what to do next
Action: tool_name[input]
Then stop: you get back "Observation: ...". Repeat as needed. When you know the answer, write:
Final Answer: the answer"""

_ACTION = re.compile(r"Action:\s*(\w+)\s*\[(.*?)\]", re.S)


def _describe(task: AgentTask) -> str:
    return "\n".join(f"- {t['function']['name']}: {t['function']['description']}" for t in task.tools)


def _argument(task: AgentTask, name: str, value: str) -> dict[str, str]:
    """The tool's one string parameter (``query``, ``code``...) set to ``value``."""
    for tool in task.tools:
        if tool["function"]["name"] == name:
            required = tool["function"]["parameters"].get("required") or ["query"]
            return {required[0]: value}
    return {"query": value}


def react_agent(task: AgentTask, max_steps: int = 4, max_tokens: int = 128, use_tools: bool = False) -> str | None:
    """Play ``task`` with a ReAct loop; returns the final answer (None if it never gave one)."""
    client = task.openai_client()
    messages: list[dict] = [{"role": "system", "content": SYSTEM.format(tools=_describe(task))},
                            {"role": "user", "content": task.question}]
    for _ in range(max_steps):
        options = {"tools": task.tools} if use_tools else {"stop": ["Observation:"]}
        reply = client.chat.completions.create(model=task.model, messages=messages, max_tokens=max_tokens,
                                               **options).choices[0].message
        messages.append(reply.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
        if reply.tool_calls:  # native function calling
            for call in reply.tool_calls:
                result = task.call_tool(call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            continue
        text = reply.content or ""
        if "Final Answer:" in text:
            return text.split("Final Answer:", 1)[1].strip()
        action = _ACTION.search(text)
        if action is None:
            if use_tools:
                return text.strip() or None  # a reply without a call is the answer
            messages.append({"role": "user", "content": "Write `Action: tool[input]` or `Final Answer: ...`."})
            continue
        name, value = action.group(1), action.group(2).strip()
        observation = task.call_tool(name, _argument(task, name, value))
        messages.append({"role": "user", "content": f"Observation: {observation}"})
    return None


if __name__ == "__main__":  # one episode against a running gateway: coa gateway MODEL --port 8300
    from agents.gateway.client import open_task

    episode = open_task("http://127.0.0.1:8300", env_id="coa/SynthHop-v1", task_index=0)
    answer = react_agent(episode)
    print(json.dumps({"answer": answer, **episode.finish(answer)}, indent=2))
