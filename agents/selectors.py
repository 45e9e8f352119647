"""Best-of-K selectors beyond the majority vote: an LLM judge picks one of K answers.

The seed's Best-of-3 chose among three runs' answers with a judge model that never sees the
gold answer. :class:`JudgeSelector` does that over any OpenAI-compatible
``/chat/completions`` endpoint (``coa serve``, vLLM, a hosted API): it shows the question
and the numbered candidate answers and asks for the number of the most likely correct one.
It is a :data:`agents.metrics.Selector`, so ``best_of_k(groups, k, JudgeSelector(...))``
and ``coa eval --selector judge`` use it.

A selector must always pick something: when the judge is unreachable, times out or replies
without a usable number, the majority vote decides and :attr:`JudgeSelector.fallbacks`
counts it (reported in ``summary.json``), so a flaky judge is visible, never fatal.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from typing import Any

from agents.metrics import majority_vote
from agents.trajectory import Trajectory

__all__ = ["JUDGE_PROMPT", "JudgeSelector"]

JUDGE_PROMPT = (
    "Several attempts answered the same question. Decide which candidate answer is most "
    "likely correct.\n\nQuestion:\n{question}\n\nCandidate answers:\n{candidates}\n\n"
    "Reply with the number of the best candidate only."
)
_NUMBER = re.compile(r"\d+")


def _question(trajectory: Trajectory) -> str:
    users = [m.get("content", "") for m in trajectory.prompt_messages if m.get("role") == "user"]
    return str(users[-1]) if users else trajectory.prompt_text


class JudgeSelector:
    """``(task_id, samples) -> index`` chosen by a judge model; thread-safe, one call per task.

    ``base_url``/``model``/``api_key`` default to ``COA_JUDGE_BASE_URL``/``COA_JUDGE_MODEL``/
    ``COA_JUDGE_API_KEY`` (the LLM-judge reward's settings).
    """

    def __init__(self, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, *, timeout_s: float = 60.0, max_tokens: int = 8):
        self.base_url = (base_url or os.environ.get("COA_JUDGE_BASE_URL") or "").rstrip("/")
        self.model = model or os.environ.get("COA_JUDGE_MODEL") or ""
        if not self.base_url or not self.model:
            raise ValueError("the judge selector needs a base URL and a model "
                             "(arguments or COA_JUDGE_BASE_URL / COA_JUDGE_MODEL)")
        self.api_key = api_key or os.environ.get("COA_JUDGE_API_KEY")
        self.timeout_s, self.max_tokens = timeout_s, max_tokens
        self.fallbacks = 0
        self.calls = 0
        self._lock = threading.Lock()
        self._client: Any = None

    def __call__(self, task_id: str, samples: Sequence[Trajectory]) -> int:
        if len(samples) <= 1:
            return 0
        candidates = "\n".join(f"{i}. {(t.answer or '(no answer)').strip()}"
                               for i, t in enumerate(samples, start=1))
        prompt = JUDGE_PROMPT.format(question=_question(samples[0]), candidates=candidates)
        reply = self._ask(prompt)
        match = _NUMBER.search(reply or "")
        if match and 1 <= int(match.group()) <= len(samples):
            return int(match.group()) - 1
        with self._lock:
            self.fallbacks += 1
        return majority_vote(task_id, samples)

    def _ask(self, prompt: str) -> str | None:
        import httpx

        with self._lock:
            self.calls += 1
            if self._client is None:
                headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                self._client = httpx.Client(timeout=self.timeout_s, headers=headers, trust_env=False)
            client = self._client
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                "temperature": 0.0, "max_tokens": self.max_tokens}
        try:
            response = client.post(f"{self.base_url}/chat/completions", json=body)
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"] or "")
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError):
            return None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
