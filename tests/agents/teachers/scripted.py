"""Scripted teacher models: a deterministic OpenAI-compatible chat-completions server.

A real HTTP server (FastAPI under uvicorn on 127.0.0.1) speaking the wire format the
``openai`` client and smolagents talk: ``POST /v1/chat/completions`` answers with assistant
messages, ``tool_calls`` included. Which agent is asking is the request's ``model`` (each
role of the system YAML names its own); what it answers is a pure function of the request's
messages and the scripts, so a run is reproducible and each scenario is built on purpose.

A script is written per question from the task's scripted solution
(``metadata["oracle_actions"]``): the manager delegates each tool call of the solution to the
member owning that tool, each member makes exactly that call and reports what the env
returned, the reflector and verifier answer in fixed words. Scenarios bend the script to make
trajectories that a distillation filter must catch: a wrong answer, a premature answer the
verifier rejects (error correction), a plan that knows the answer before any search (leak),
an empty tool query (a format error the env corrects), extra searches (too long).
"""

# No `from __future__ import annotations`: FastAPI must see `Request` as a real type.

import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from coa_envs.protocol import parse_turn

__all__ = ["Answer", "Delegate", "Script", "ScriptedTeam", "message_text", "script_from_task", "serve_scripted"]

MEMBER_FOR_TOOL = {"web_search": "web_agent", "crawl_page": "web_agent", "wiki_search": "wiki_agent",
                   "code": "code_agent"}


@dataclass(frozen=True)
class Delegate:
    member: str
    tool: str
    query: str
    thought: str = ""
    stumble: bool = False  # the member's first reply is prose with no tool call (a parse error)

    @property
    def task(self) -> str:
        return f"Run {self.tool} with this exact input:\n{self.query}"


@dataclass(frozen=True)
class Answer:
    text: str
    thought: str = ""


@dataclass
class Script:
    question: str
    gold: tuple[str, ...]
    plan: str
    steps: list[Delegate | Answer]
    verifier: str = "gold"  # gold: accept iff the suggestion is a gold answer | accept: always
    reflect: bool = True


def script_from_task(task: Any, scenario: str = "clean", member_for_tool: dict[str, str] | None = None) -> Script:
    """The script of ``task`` (its oracle solution as delegations) bent by ``scenario``."""
    owners = member_for_tool or MEMBER_FOR_TOOL
    steps: list[Delegate | Answer] = []
    final = ""
    for action in task.metadata["oracle_actions"]:
        parsed = parse_turn(action)
        thought = next((role.text for role in parsed.roles if role.tag == "think"), "")
        for call in parsed.tool_calls:
            steps.append(Delegate(owners[call.tool], call.tool, call.query, thought))
        if parsed.answer is not None:
            final = parsed.answer
    gold = tuple(task.gold) or (final,)
    plan = f"Split the question into {sum(isinstance(s, Delegate) for s in steps)} lookups and do them in order."
    verifier, wrong = "gold", "Nobody Knows"
    if scenario == "wrong":
        final, verifier = wrong, "accept"
    elif scenario == "corrected":  # answers too early, is sent back by the verifier, recovers
        steps.insert(1, Answer(wrong, "That should be enough to answer."))
    elif scenario == "leaky":
        plan = f"I already know the answer is {gold[0]}; the searches only confirm it."
    elif scenario == "bad_action":
        first = next(i for i, s in enumerate(steps) if isinstance(s, Delegate))
        broken = steps[first]
        assert isinstance(broken, Delegate)
        steps.insert(first, Delegate(broken.member, broken.tool, "", "Let me search."))
    elif scenario == "long":
        extra = [Delegate(s.member, s.tool, f"{s.query} (more)", "Search once more to be sure.")
                 for s in steps if isinstance(s, Delegate) and s.tool != "code"]
        steps = extra + steps
    elif scenario == "stumble":
        steps = [Delegate(s.member, s.tool, s.query, s.thought, stumble=True) if isinstance(s, Delegate) else s
                 for s in steps]
    elif scenario != "clean":
        raise ValueError(f"unknown scenario {scenario!r}")
    steps.append(Answer(final, "The findings answer the question."))
    return Script(task.question, gold, plan, steps, verifier)


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class ScriptedTeam:
    """Answers chat-completion requests for every role from the scripts, deterministically."""

    def __init__(self, scripts: list[Script]):
        self.scripts = scripts
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _script_for(self, text: str) -> Script:
        for script in self.scripts:
            if script.question in text:
                return script
        raise LookupError("no script for this conversation")

    def _delegation(self, text: str) -> Delegate:
        """The scripted delegation this member works on (the longest task found: one task with an
        empty query is a prefix of the others)."""
        found = [step for script in self.scripts for step in script.steps
                 if isinstance(step, Delegate) and step.task in text]
        if not found:
            raise LookupError("no scripted delegation matches this member's task")
        return max(found, key=lambda step: len(step.task))

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message (``content`` and optional ``tool_calls``) for one request."""
        with self._lock:
            self.requests.append(body)
        role = body.get("model", "")
        messages = body.get("messages") or []
        texts = [message_text(m) for m in messages]
        joined = "\n".join(texts)
        if role == "reflector":
            script = self._script_for(joined)
            return {"content": "The report answers this step with evidence from the tool; continue with the "
                               "next step, or answer if none is left." if script.reflect else ""}
        if role == "verifier":
            script = self._script_for(joined)
            suggested = joined.split("Suggested answer:\n", 1)[1].split("\n\nEvidence", 1)[0].strip()
            ok = script.verifier == "accept" or suggested in script.gold
            return {"content": ("The evidence supports the answer." if ok else
                                "The evidence does not support this answer; another hop is needed.")
                    + f"\nVERDICT: {'ACCEPT' if ok else 'REJECT'}"}
        if role == "manager":
            return self._manager(body, self._script_for(joined), texts)
        return self._member(texts, joined)

    def _manager(self, body: dict[str, Any], script: Script, texts: list[str]) -> dict[str, Any]:
        if not body.get("tools"):
            if "<end_plan>" in (body.get("stop") or []):
                return {"content": script.plan + "\n<end_plan>"}
            return {"content": [s for s in script.steps if isinstance(s, Answer)][-1].text}
        done = sum(text.startswith("Observation:\nReport from") for text in texts)
        rejected = sum("the verifier rejected" in text for text in texts)
        step = script.steps[min(done + rejected, len(script.steps) - 1)]
        if isinstance(step, Delegate):
            return _call(step.thought, step.member, {"task": step.task})
        return _call(step.thought, "final_answer", {"answer": step.text})

    def _member(self, texts: list[str], joined: str) -> dict[str, Any]:
        step = self._delegation(joined)
        observations = [text for text in texts if text.startswith("Observation:\n")]
        if step.stumble and not any("Error:\n" in text for text in texts):
            return {"content": "Hmm, which query would work best here?"}
        if not observations:
            return _call(f"I will call {step.tool} as asked.", step.tool, {"query": step.query})
        seen = observations[-1][len("Observation:\n"):].strip().replace("\n", " ")
        return _call("", "final_answer", {"answer": f"The {step.tool} result says: {seen[:300]}"})


def _call(content: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"content": content, "tool_calls": [{"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                                                "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def create_app(team: ScriptedTeam) -> Any:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI(title="scripted teacher")

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0, "owned_by": "tests"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        try:
            message = team.reply(body)
        except LookupError as error:
            return JSONResponse({"error": {"message": str(error), "type": "invalid_request_error"}}, status_code=400)
        prompt = sum(len(message_text(m).split()) for m in body.get("messages") or [])
        completion = len((message.get("content") or "").split()) + 8 * len(message.get("tool_calls") or [])
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}})

    return app


def serve_scripted(team: ScriptedTeam) -> Any:
    """``with serve_scripted(team) as base_url:`` a live server for the block."""
    from agents.server import serve_in_thread

    return serve_in_thread(create_app(team))

