"""A scripted multi-role teacher: CoA-shaped demonstrations played through the env's real tools.

The paper's trajectories are a team's work inside one reply: a planner splits the question,
tool agents search and read, a reflector checks each result, a verifier confirms the answer
against the evidence before it is given. :class:`ScriptedTeam` plays those roles by script,
with no model, so demonstrations for a small model can be made offline and in seconds:

* **planner** (``<plan>``, first turn): one numbered step per fact to find, written from the
  task's structure (SynthHop: the relation chain; MiniWeb: search, then the pages to read),
  never from the answers;
* **tool agent**: the searches and page reads of the task's solution path
  (``metadata["oracle_actions"]``), sent to the env, whose real tools answer;
* **reflector** (``<reflection>``, after every observation): reads what the tool *really*
  returned; when the fact a step needs is there it states it, when it is not it says so and
  the tool agent tries again with the entity's name alone (once per step);
* **verifier** (``<double_check>``): quotes the words of an observation that state the
  candidate answer; when no observation states it, the verifier refuses and the team answers
  ``unknown`` (an episode the distillation filter drops).

Spans are short on purpose: a 135M-parameter student on two CPU cores pays for every
generated token in SFT, in every eval and in every RL rollout.

``explore`` (default 0.1, seeded per episode) makes the tool agent open a step with a weaker
query (the subject's last word and the relation keyword) so that some demonstrations show
the reflector catching a miss and the retry that recovers; whether it missed is decided by
the real search, not by the script.

Use it as any agent: ``coa eval ENV --agent agents.teachers.scripted:ScriptedTeam --split
train`` (an agent class whose constructor takes ``env`` gets the episode's env and seed).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from coa_envs.protocol import parse_turn

__all__ = ["ScriptedTeam"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass
class _Step:
    """One tool call of the solution path and what its result must show."""

    tool: str
    query: str
    evidence: str
    """A string the observation holds when the step worked (the next entity, a URL, the fact)."""
    plan_line: str
    found_line: str
    """What the reflector says when the evidence is there."""
    retry_query: str = ""


class ScriptedTeam:
    """Planner, tool agent, reflector and verifier, scripted (see the module docstring)."""

    def __init__(self, env: Any, seed: int = 0, explore: float = 0.1) -> None:
        self.env = env.unwrapped
        self.rng = random.Random(f"scripted-team:{seed}")
        self.explore = explore
        self._steps: list[_Step] = []
        self._answer = ""
        self._done = 0  # steps whose evidence was found (or given up on)
        self._retried = False
        self._observations: list[str] = []
        self._turn = 0

    # -- Agent protocol -----------------------------------------------------------------
    def reset(self, observation: str, info: dict[str, Any]) -> None:
        task = self.env.task
        actions = list(task.metadata.get("oracle_actions") or [])
        if not actions:
            raise ValueError(f"task {task.task_id} has no solution path (metadata oracle_actions): "
                             "the scripted team plays SynthHop and MiniWeb tasks")
        self._answer = parse_turn(actions[-1]).answer or (task.gold[0] if task.gold else "")
        self._steps = _steps_for(task, actions[:-1])
        self._done, self._retried, self._observations, self._turn = 0, False, [], 0

    def act(self, observation: str, info: dict[str, Any]) -> str:
        self._turn += 1
        if self._turn == 1:
            plan = " ".join(f"{i}. {s.plan_line}" for i, s in enumerate(self._steps, start=1))
            return f"<plan>{plan}</plan>\n" + self._call(self._steps[0], first=True)
        self._observations.append(observation)
        step = self._steps[self._done]
        if step.evidence.lower() in observation.lower():
            found = _result_rank(step, observation) or step.found_line
            reflection = f"<reflection>Step {self._done + 1} found: {found}</reflection>\n"
            self._done, self._retried = self._done + 1, False
        elif not self._retried:
            self._retried = True
            retry = step.retry_query or step.query
            return (f"<reflection>Step {self._done + 1}: the result does not show it; I will try "
                    f"again.</reflection>\n" + _tool(step.tool, retry))
        else:  # twice without the fact: go on with what the team has, the verifier decides
            reflection = f"<reflection>Step {self._done + 1}: still not found.</reflection>\n"
            self._done, self._retried = self._done + 1, False
        if self._done < len(self._steps):
            nxt = self._steps[self._done]
            return reflection + f"<think>Next, step {self._done + 1}.</think>\n" + self._call(nxt)
        return reflection + self._verify()

    # -- roles --------------------------------------------------------------------------
    def _call(self, step: _Step, first: bool = False) -> str:
        weak = _weak_query(step) if self.explore and self.rng.random() < self.explore else ""
        if weak:
            self._retried = False  # the retry (the solution path's own query) stays available
            step.retry_query = step.query
            return _tool(step.tool, weak)
        return _tool(step.tool, step.query)

    def _verify(self) -> str:
        """The verifier: quote an observation's sentence that states the answer, or refuse."""
        answer = self._answer
        forms = [answer] + ([f"{int(answer):,}"] if answer.isdigit() else [])  # 12000 as "12,000"
        # whole words only, and a number not inside a longer one ("12" is not in "12,000")
        pattern = re.compile("|".join(rf"(?<!\w)(?<!\d,){re.escape(f)}(?!\w)(?!,\d)" for f in forms),
                             re.I)
        for observation in reversed(self._observations):
            body = observation.replace("<observation>", "").replace("</observation>", "")
            for sentence in _SENTENCE.split(body):
                match = pattern.search(sentence)
                if match and not sentence.lstrip().startswith(("URL:", "- ")):
                    quote = _clip(sentence.strip(), match.group(0))
                    return (f"<double_check>\"{quote}\" confirms {answer}.</double_check>\n"
                            f"<answer>{answer}</answer>")
        return ("<double_check>No result states an answer I can confirm.</double_check>\n"
                "<answer>unknown</answer>")


def _tool(tool: str, query: str) -> str:
    return f"<{tool}>{query}</{tool}>"


def _clip(sentence: str, answer: str, before: int = 6, after: int = 3) -> str:
    """The words of ``sentence`` around the answer: up to ``before`` words ahead of it and
    ``after`` behind, whole words only."""
    at = sentence.lower().find(answer.lower())
    if at < 0:
        return sentence
    head = sentence[:at].split()
    tail = sentence[at + len(answer):].split()
    words = head[-before:] + [sentence[at:at + len(answer)] + (tail[0] if tail and
                                                              not sentence[at + len(answer)].isspace() else "")]
    if tail and not sentence[at + len(answer)].isspace():
        tail = tail[1:]
    words += tail[:after]
    return ("..." if len(head) > before else "") + " ".join(words) + ("..." if len(tail) > after else "")


def _result_rank(step: _Step, observation: str) -> str:
    """For a web search whose evidence is a URL: which numbered result holds it."""
    if step.tool != "web_search" or not step.evidence.startswith("http"):
        return ""
    rank = ""
    for line in observation.splitlines():
        number = re.match(r"(\d+)\. ", line)
        if number:
            rank = number.group(1)
        elif line.strip() == f"URL: {step.evidence}" and rank:
            return f"result {rank} is the page to read."  # "Step 1 found: result 2 is ..."
    return ""


def _weak_query(step: _Step) -> str:
    """A plausible but weaker first query: a wiki search with only part of the subject's name."""
    if step.tool != "wiki_search":
        return ""
    words = step.query.split()
    return " ".join(words[-2:]) if len(words) > 2 else ""


def _steps_for(task: Any, actions: list[str]) -> list[_Step]:
    calls = []
    for action in actions:
        parsed = parse_turn(action)
        if not parsed.tool_calls:
            raise ValueError(f"task {task.task_id}: a solution step without a tool call: {action!r}")
        calls.append(parsed.tool_calls[0])
    if task.metadata.get("dataset") == "synthhop":
        return _synthhop_steps(task, calls)
    return _page_steps(task, calls)


def _synthhop_steps(task: Any, calls: list[Any]) -> list[_Step]:
    """One step per hop: ask the hop's question about the entity the last hop revealed."""
    from coa_envs.tasks.synthhop.world import RELATIONS

    by_name = {r.name: r for r in RELATIONS}
    relations = [by_name[name] for name in task.metadata["relations"]]
    subjects = list(task.metadata["support_titles"])
    values = [*subjects[1:], task.gold[0]]  # what each hop finds: the next subject, then the answer
    steps = []
    for hop, (call, relation) in enumerate(zip(calls, relations, strict=True)):
        kind = relations[hop - 1].target if hop else ""
        subject_words = subjects[hop] if hop == 0 else f"that {_KIND_WORDS.get(kind, 'one')}"
        plan = relation.question.format(x=subject_words)
        found = f"{values[hop]}."
        steps.append(_Step(call.tool, call.query, values[hop], plan, found, retry_query=subjects[hop]))
    return steps


_KIND_WORDS = {"person": "person", "company": "company", "city": "city", "country": "country",
               "university": "university", "product": "product"}


def _page_steps(task: Any, calls: list[Any]) -> list[_Step]:
    """Search, then the pages to read (MiniWeb): each step's evidence is the task's own."""
    evidence = list(task.metadata.get("oracle_evidence") or [])
    steps = []
    for index, call in enumerate(calls):
        expected = evidence[index] if index < len(evidence) else ""
        if call.tool == "crawl_page":
            goal = call.query.partition("|")[2].strip()
            plan = f"Read the page for the {goal or 'fact'}."  # the URL comes from the results
            found = f"\"{expected}\"." if expected else "the page."
        else:
            plan = f"Search for {call.query}."
            found = "the page to read." if expected else "results."
        steps.append(_Step(call.tool, call.query, expected, plan, found))
    return steps
