"""Non-learned reference agents, to show how far below the oracle an env's floor is.

``retrieval_baseline`` is the retrieval-only baseline of the multi-hop QA acceptance: one
``wiki_search`` with the question itself, then answer with the title of the top passage.
It is a plain ``(observation, info) -> action`` callable (wrap with
``agents.base.as_agent``) and keeps no state: the first turn is recognised by the reset
``info`` carrying ``messages``; every later turn answers from the observation it is given.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["retrieval_baseline"]

_TOP_TITLE = re.compile(r"Doc 1 \(Title: (.*?)\)\s*$", re.MULTILINE)


def retrieval_baseline(observation: str, info: dict[str, Any]) -> str:
    """Search once with the question; answer with the first passage's title (or "unknown")."""
    messages = info.get("messages") if isinstance(info, dict) else None
    if messages:
        question = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        query = " ".join(str(question).split())
        return f"<think>I will search for the question as asked.</think>\n<wiki_search>{query}</wiki_search>"
    match = _TOP_TITLE.search(observation or "")
    answer = match.group(1).strip() if match else "unknown"
    return f"<think>The top passage is about {answer}.</think>\n<answer>{answer}</answer>"
