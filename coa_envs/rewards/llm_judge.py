"""LLM-as-judge reward over an OpenAI-compatible ``/chat/completions`` endpoint.

The seed scored every web benchmark with an LLM judge; BrowseComp and HLE define official
grader prompts whose reply is ``extracted_final_answer: ... reasoning: ... correct: yes|no
confidence: ...``. The prompts below are our own wording of those semantics, *versioned*:
a change of wording is a new version, and the version is reported with every score.

Guarantees:
- the verdict is parsed strictly: exactly one ``correct: yes|no`` verdict (repeated lines
  must agree), otherwise the reply is *unparseable*;
- network errors, timeouts, 5xx/429 and unparseable replies are retried with backoff;
- a judge that stays dead or confused never yields a correct answer: score 0 and
  ``details["error"]`` names the failure kind; the raw reply is kept in ``details``;
- with no judge configured (no base URL/model in config or ``COA_JUDGE_*`` env vars) the
  reward falls back to GAIA's quasi-exact match and says so: ``details["scorer"] ==
  "fallback_em"``.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx

from coa_envs.rewards.gaia import gaia_match
from coa_envs.types import RewardResult, Task

__all__ = ["PROMPTS", "VERSION", "JudgeConfig", "JudgeError", "LLMJudgeReward", "build", "parse_verdict"]

VERSION = 1  # bump when the scores this term gives change (reported in reward_details)

_GRADING_RULES = """\
Your judgement must use exactly this format, one field per line:

extracted_final_answer: the final exact answer taken from [response]; write None if [response] \
contains no final answer.
reasoning: say why extracted_final_answer is or is not the same answer as [correct_answer]. \
Only look for meaningful differences between the two; do not discuss the background of the \
question, do not try to solve it yourself, and do not argue for an answer other than \
[correct_answer].
correct: yes if extracted_final_answer is equivalent to [correct_answer], or within a small \
margin of error for a numerical answer; no otherwise (any inconsistency, ambiguity, \
non-equivalence, a missing answer or a wrong answer).
confidence: the confidence score between 0% and 100% stated in [response]; 100 if it states none.
"""

_OFFICIAL_STYLE = (
    "Decide whether the [response] to the [question] is correct, judged only against the "
    "precise and unambiguous [correct_answer] below.\n\n"
    "[question]: {question}\n\n[response]: {response}\n\n[correct_answer]: {correct_answer}\n\n"
)

PROMPTS: dict[str, str] = {
    # BrowseComp's official grader semantics (simple-evals), our wording.
    "browsecomp-v1": _OFFICIAL_STYLE + _GRADING_RULES,
    # HLE's official judge semantics (same fields; strict equivalence to the reference).
    "hle-v1": _OFFICIAL_STYLE + _GRADING_RULES,
    # The generic web judge: the reference may be a full sentence; the key facts must match.
    "generic-v1": (
        "You grade answers to information-seeking questions. The [correct_answer] may be a "
        "short phrase or a sentence; the [response] is correct when it states the same key "
        "facts (names, numbers, dates, places) as [correct_answer], in any wording, without "
        "contradicting it. Extra detail is fine; a missing or different key fact is not.\n\n"
        "[question]: {question}\n\n[response]: {response}\n\n[correct_answer]: {correct_answer}\n\n"
        + _GRADING_RULES
    ),
}
_ALIASES = {"browsecomp": "browsecomp-v1", "hle": "hle-v1", "generic": "generic-v1"}

_VERDICT = re.compile(r"^[\s*#>_`-]*correct[\s*_`]*:[\s*_`]*(yes|no)\b", re.IGNORECASE | re.MULTILINE)
_EXTRACTED = re.compile(r"^[\s*#>_`-]*extracted_final_answer[\s*_`]*:\s*(.*)$", re.I | re.M)
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class JudgeError(StrEnum):
    """Why a judge call gave no verdict (stable values for metrics)."""

    UNREACHABLE = "judge_unreachable"
    TIMEOUT = "judge_timeout"
    HTTP_STATUS = "judge_http_status"
    BAD_RESPONSE = "judge_bad_response"
    UNPARSEABLE = "judge_unparseable"


def parse_verdict(reply: str) -> bool | None:
    """``True``/``False`` for one unambiguous ``correct: yes|no``; ``None`` otherwise."""
    verdicts = {match.lower() for match in _VERDICT.findall(reply)}
    if len(verdicts) != 1:
        return None
    return verdicts.pop() == "yes"


@dataclass(frozen=True, slots=True)
class JudgeConfig:
    """Where the judge lives and how hard to try. ``None`` fields come from ``COA_JUDGE_*``."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    prompt: str = "generic-v1"
    max_retries: int = 2
    backoff_s: float = 0.5
    timeout_s: float = 60.0
    temperature: float = 0.0
    max_tokens: int = 1024
    fallback: str = "gaia"

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)


class LLMJudgeReward:
    """Reward = 1.0 when the judge answers ``correct: yes`` for (question, answer, gold)."""

    def __init__(self, config: JudgeConfig):
        self.config = config
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    # -- transport ---------------------------------------------------------------------
    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                headers = {"Content-Type": "application/json"}
                if self.config.api_key:
                    headers["Authorization"] = f"Bearer {self.config.api_key}"
                self._client = httpx.Client(timeout=self.config.timeout_s, headers=headers,
                                            trust_env=False)
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _ask(self, prompt: str) -> tuple[str | None, JudgeError | None, str]:
        """One request: (reply text, error kind, error message)."""
        url = self.config.base_url.rstrip("/") + "/chat/completions"  # type: ignore[union-attr]
        body = {"model": self.config.model, "messages": [{"role": "user", "content": prompt}],
                "temperature": self.config.temperature, "max_tokens": self.config.max_tokens}
        try:
            response = self._http().post(url, json=body)
        except httpx.TimeoutException as exc:
            return None, JudgeError.TIMEOUT, f"{type(exc).__name__}: {exc}"
        except httpx.HTTPError as exc:
            return None, JudgeError.UNREACHABLE, f"{type(exc).__name__}: {exc}"
        if response.status_code != 200:
            return None, JudgeError.HTTP_STATUS, f"HTTP {response.status_code}: {response.text[:300]}"
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return None, JudgeError.BAD_RESPONSE, f"not a chat completion: {response.text[:300]}"
        if not isinstance(content, str):
            return None, JudgeError.BAD_RESPONSE, "message content is not text"
        return content, None, ""

    # -- reward ------------------------------------------------------------------------
    def __call__(self, prediction: str, task: Task) -> RewardResult:
        prediction = "" if prediction is None else str(prediction)
        if not self.config.configured:
            return self._fallback(prediction, task)
        if not task.gold:
            return RewardResult(0.0, {"scorer": "llm_judge", "error": "task has no gold answer"})
        prompt = PROMPTS[self.config.prompt].format(
            question=task.question, response=prediction, correct_answer=" | ".join(task.gold)
        )
        details: dict[str, Any] = {"scorer": "llm_judge", "prompt_version": self.config.prompt,
                                   "model": self.config.model, "raw_reply": None}
        error: JudgeError | None = None
        message = ""
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                time.sleep(self.config.backoff_s * (2 ** (attempt - 1)))
            details["attempts"] = attempt + 1
            reply, error, message = self._ask(prompt)
            if reply is not None:
                details["raw_reply"] = reply
                verdict = parse_verdict(reply)
                if verdict is not None:
                    extracted = _EXTRACTED.search(reply)
                    details["extracted_final_answer"] = extracted.group(1).strip() if extracted else None
                    details["verdict"] = "yes" if verdict else "no"
                    return RewardResult(1.0 if verdict else 0.0, details)
                error, message = JudgeError.UNPARSEABLE, "no single 'correct: yes|no' verdict"
            elif error is JudgeError.HTTP_STATUS and not _retryable(message):
                break
        details["error"] = error.value if error else JudgeError.UNPARSEABLE.value
        details["error_message"] = message
        return RewardResult(0.0, details)

    def _fallback(self, prediction: str, task: Task) -> RewardResult:
        details: dict[str, Any] = {"scorer": "fallback_em", "fallback": self.config.fallback,
                                   "reason": "no judge configured (base_url/model or COA_JUDGE_*)"}
        if self.config.fallback == "off":
            details["error"] = "not_configured"
            return RewardResult(0.0, details)
        matched = [gold for gold in task.gold if gaia_match(prediction.strip(), gold)]
        details["matched_gold"] = matched[0] if matched else None
        return RewardResult(1.0 if matched else 0.0, details)


def _retryable(message: str) -> bool:
    match = re.match(r"HTTP (\d+)", message)
    return bool(match) and int(match.group(1)) in _RETRY_STATUS


_OPTIONS = {"base_url", "model", "api_key", "prompt", "max_retries", "backoff_s", "timeout_s",
            "temperature", "max_tokens", "fallback"}


def build(**config: Any) -> LLMJudgeReward:
    """Registry entry point: ``reward: {name: llm_judge, prompt: browsecomp}``.

    ``prompt`` is a versioned name (``browsecomp-v1``) or an alias of the newest version
    (``browsecomp``, ``hle``, ``generic``). ``base_url``/``model``/``api_key`` default to
    ``COA_JUDGE_BASE_URL``/``COA_JUDGE_MODEL``/``COA_JUDGE_API_KEY``; ``base_url`` is the
    API root (``http://host:port/v1``). ``fallback``: ``gaia`` (quasi exact match when no
    judge is configured) or ``off`` (score 0).
    """
    unknown = set(config) - _OPTIONS
    if unknown:
        raise ValueError(f"llm_judge: unknown option(s) {sorted(unknown)}; allowed: {sorted(_OPTIONS)}")
    prompt = _ALIASES.get(config.get("prompt", "generic"), config.get("prompt", "generic"))
    if prompt not in PROMPTS:
        raise ValueError(f"llm_judge: prompt={prompt!r} is not valid; allowed: "
                         f"{sorted(PROMPTS) + sorted(_ALIASES)}")
    if config.get("fallback", "gaia") not in ("gaia", "off"):
        raise ValueError(f"llm_judge: fallback={config['fallback']!r} is not valid; allowed: gaia, off")
    for key in ("max_retries", "max_tokens"):
        if key in config and (not isinstance(config[key], int) or config[key] < 0):
            raise ValueError(f"llm_judge: {key}={config[key]!r} is not valid; allowed: int >= 0")
    resolved = {
        **config,
        "prompt": prompt,
        "base_url": config.get("base_url") or os.environ.get("COA_JUDGE_BASE_URL") or None,
        "model": config.get("model") or os.environ.get("COA_JUDGE_MODEL") or None,
        "api_key": config.get("api_key") or os.environ.get("COA_JUDGE_API_KEY") or None,
    }
    return LLMJudgeReward(JudgeConfig(**resolved))
