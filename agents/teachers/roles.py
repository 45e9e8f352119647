"""The role agents without tools: a reflector that reviews each delegated step, and a verifier
that double-checks a suggested final answer against the evidence before it becomes final.

Each is one chat call to its own endpoint through the framework's model class (so retries,
timeouts and the wire format are the framework's). Their words become the ``<reflection>``
and ``<double_check>`` spans of the distilled trajectory; the verifier's verdict decides
whether the manager must keep working (its error-correction loop).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["REFLECTOR_PROMPT", "VERIFIER_PROMPT", "Reflector", "Verdict", "Verifier", "parse_verdict"]

REFLECTOR_PROMPT = (
    "You are the reflection agent of a small research team. After each step a team member "
    "reports back; you review the step. In two or three sentences say whether the report really "
    "answers the step and is backed by what the member found, what is still missing, and what the "
    "team should do next (or that the question can now be answered). Do not invent facts."
)
VERIFIER_PROMPT = (
    "You are the verification agent of a small research team. The manager suggests a final "
    "answer. Check it against the evidence the team gathered: is it supported, and does it answer "
    "exactly what was asked, in the requested form? Explain briefly, then end with a last line that "
    "is exactly 'VERDICT: ACCEPT' or 'VERDICT: REJECT'."
)
_VERDICT_RE = re.compile(r"VERDICT\s*:\s*\**\s*(ACCEPT|REJECT)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the verifier said. ``decision`` is ``accept``, ``reject`` or ``unclear`` (no verdict
    line: the answer is let through, since an unreadable check cannot block the team)."""

    decision: str
    text: str

    @property
    def rejected(self) -> bool:
        return self.decision == "reject"


def parse_verdict(text: str) -> Verdict:
    """The last ``VERDICT: ACCEPT|REJECT`` line of the verifier's reply decides."""
    found = _VERDICT_RE.findall(text or "")
    return Verdict(found[-1].lower() if found else "unclear", (text or "").strip())


def _chat(model: Any, system: str, user: str) -> str:
    from smolagents.models import ChatMessage, MessageRole

    messages = [ChatMessage(role=MessageRole.SYSTEM, content=[{"type": "text", "text": system}]),
                ChatMessage(role=MessageRole.USER, content=[{"type": "text", "text": user}])]
    reply = model.generate(messages)
    return reply.content if isinstance(reply.content, str) else ""


class Reflector:
    """Reviews one delegated step: the sub-task, and the member's report."""

    def __init__(self, model: Any, instructions: str = ""):
        self.model, self.prompt = model, instructions or REFLECTOR_PROMPT

    def reflect(self, question: str, member: str, task: str, report: str) -> str:
        user = (f"Question the team must answer:\n{question}\n\nThe manager asked {member}:\n{task}\n\n"
                f"{member} reported:\n{report}\n\nYour reflection:")
        return _chat(self.model, self.prompt, user).strip()


class Verifier:
    """Double-checks a suggested answer against the most recent ``evidence_chars`` of evidence."""

    def __init__(self, model: Any, instructions: str = "", evidence_chars: int = 6000):
        self.model, self.prompt, self.evidence_chars = model, instructions or VERIFIER_PROMPT, evidence_chars

    def check(self, question: str, answer: str, evidence: list[str]) -> Verdict:
        joined = "\n---\n".join(evidence)
        if len(joined) > self.evidence_chars:
            joined = "[... earlier results cut]\n" + joined[len(joined) - self.evidence_chars:]
        user = (f"Question:\n{question}\n\nSuggested answer:\n{answer}\n\n"
                f"Evidence the team gathered (tool results):\n{joined or '(none)'}\n\nYour check:")
        return parse_verdict(_chat(self.model, self.prompt, user))
