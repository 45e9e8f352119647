"""Inference engines behind :class:`agents.policy.LLMPolicy`: one small protocol, three backends.

An engine turns prompts into completions and reports *what it sampled*: token ids and
their logprobs, not just text. Backends:

* ``hf`` (:mod:`agents.engines.hf`): transformers model, continuous batching, KV cache
  reused across an episode's turns, per-request seeds.
* ``vllm`` (:mod:`agents.engines.vllm`): vLLM's offline ``LLM`` engine (optional extra, GPU).
* ``openai`` (:mod:`agents.engines.openai_compat`): any OpenAI-compatible endpoint
  (``coa serve``, vLLM's server, a hosted API), with retries, timeouts and a concurrency cap.

The contract every engine keeps (the trajectory's token-exactness rests on it):
``Completion.text == tokenizer.decode(Completion.token_ids)`` whenever ids are reported, and
ids are exactly those sampled. A stop string may end inside a token (byte-level merges can
span ``</code>\\n<``); the engine then keeps the whole token and ``text`` shows its extra
characters, while :attr:`Completion.action_text` is cut right after the stop string for the
env. Failures come back as ``finish_reason="error"`` with an ``error_kind``, never raised,
so one bad request ends one episode, not the run.

This module is stdlib only; backends import their heavy libraries lazily.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_STOP",
    "ENGINES",
    "MAX_TOP_LOGPROBS",
    "Completion",
    "Engine",
    "EngineErrorKind",
    "GenerationRequest",
    "SamplingParams",
    "build_engine",
    "find_stop",
]

try:  # the protocol owns the stop strings; keep a fallback so engines import standalone
    from coa_envs.protocol import STOP_STRINGS as DEFAULT_STOP
except ImportError:  # pragma: no cover - only before the protocol module exists
    DEFAULT_STOP = (
        "</web_search>", "</crawl_page>", "</wiki_search>", "</code>", "</visual_inspector>",
        "</answer>",
    )

MAX_TOP_LOGPROBS = 20  # OpenAI's limit for top_logprobs
SEED_RANGE = (-(2**63), 2**64 - 1)  # what a torch generator takes

FinishReason = Literal["stop", "eos", "length", "error", "abort"]


class EngineErrorKind(StrEnum):
    """Why an engine produced no usable completion. Values are stable metric keys."""

    TIMEOUT = "engine_timeout"
    HTTP_ERROR = "engine_http_error"
    CONTEXT_OVERFLOW = "context_overflow"
    BAD_RESPONSE = "engine_bad_response"
    INTERNAL = "engine_internal"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-call sampling settings. ``temperature=0`` means greedy.

    ``seed`` makes one request reproducible regardless of which other requests share its
    batch (engines that can, derive a private generator from it).
    """

    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = DEFAULT_STOP
    seed: int | None = None
    top_logprobs: int = 0
    """How many of the most likely tokens to report at each step, with their logprobs
    (:attr:`Completion.top_logprobs`; OpenAI's ``top_logprobs``, at most 20). Engines that do not
    compute them say so with ``supports_top_logprobs = False`` (or no such attribute)."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}; must be >= 1")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}; must be a finite number >= 0 (0 = greedy)")
        if self.seed is not None and not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]:
            raise ValueError(f"seed={self.seed}; must be in [{SEED_RANGE[0]}, {SEED_RANGE[1]}] (64 bits)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p}; must be in (0, 1]")
        if self.top_k < -1:  # vLLM's spelling: 0 or -1 keeps every token
            raise ValueError(f"top_k={self.top_k}; must be >= 1, or 0 / -1 for no limit")
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs={self.top_logprobs}; must be in [0, {MAX_TOP_LOGPROBS}]")


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One prompt. Local engines use ``token_ids``; HTTP engines may use any of the three.

    ``messages`` is the chat history for chat endpoints; ``prefix`` is the assistant text
    generated so far in this episode (continued, not re-prompted, on chat endpoints).
    ``on_token(token_id, logprob)``, when set, is called for every sampled token as it is
    sampled (streaming servers); engines that cannot stream call it after the fact. With
    ``params.top_logprobs``, it gets a third argument: that step's most likely
    ``(token_id, logprob)`` pairs.
    ``tools`` (OpenAI ``tools`` list) asks a chat endpoint for native function calling.
    ``resume_ids`` continues a turn that an interruption cut short (``finish_reason ==
    "abort"``, e.g. an RL weight update): they are the ids that turn already sampled, the tail
    of ``token_ids``, and stop strings are searched across them and the new ids, so a stop
    split by the interruption is still caught. ``cancel``, when set (a streaming client hung
    up), ends the request at the next decode step with what it sampled (``finish_reason ==
    "abort"``); a request cancelled before it started samples nothing. Engines that cannot stop
    one request mid-way still skip a request cancelled before it starts.
    """

    token_ids: tuple[int, ...] = ()
    text: str = ""
    messages: tuple[dict[str, Any], ...] = ()
    prefix: str = ""
    params: SamplingParams | None = None
    on_token: Callable[[int, float], None] | None = field(default=None, compare=False)
    tools: tuple[dict[str, Any], ...] = ()
    resume_ids: tuple[int, ...] = ()
    cancel: threading.Event | None = field(default=None, compare=False)

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


@dataclass(frozen=True, slots=True)
class Completion:
    """What an engine sampled for one request. ``finish_reason == "abort"``: the engine was
    interrupted (:meth:`agents.engines.hf.HFEngine.interrupt`) and returns what it had
    sampled so far; the caller may continue the turn with ``GenerationRequest.resume_ids``."""

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    finish_reason: FinishReason = "stop"
    stop_string: str | None = None
    error_kind: EngineErrorKind | None = None
    error: str = ""
    eos_text: str = ""
    usage: dict[str, Any] = field(default_factory=dict)
    tool_calls: tuple[dict[str, Any], ...] = ()
    """Function calls a chat endpoint returned (OpenAI shape), when ``tools`` were sent."""
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
    """Per sampled token, the ``params.top_logprobs`` most likely ``(token_id, logprob)`` pairs
    of its step, most likely first (empty unless asked for)."""

    @property
    def ok(self) -> bool:
        return self.finish_reason != "error"

    @property
    def action_text(self) -> str:
        """The text to hand the env: cut right after the stop string, or before the eos."""
        if self.stop_string:
            at = self.text.find(self.stop_string)
            if at >= 0:
                return self.text[: at + len(self.stop_string)]
        if self.finish_reason == "eos" and self.eos_text and self.text.endswith(self.eos_text):
            return self.text[: -len(self.eos_text)]
        return self.text

    @classmethod
    def failure(cls, kind: EngineErrorKind, message: str) -> Completion:
        return cls(text="", finish_reason="error", error_kind=kind, error=message)


def find_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """Earliest stop string in ``text`` as ``(end_index, stop)``; None when there is none."""
    best: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop)
        if at >= 0 and (best is None or at + len(stop) < best[0]):
            best = (at + len(stop), stop)
    return best


@runtime_checkable
class Engine(Protocol):
    """Generates completions for a batch of requests; never raises for a bad request."""

    name: str

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Completion]: ...


ENGINES: tuple[str, ...] = ("hf", "vllm", "openai")


def build_engine(name: str, **config: Any) -> Engine:
    """``hf`` | ``vllm`` | ``openai`` -> an engine; ``config`` goes to its constructor."""
    if name == "hf":
        from agents.engines.hf import HFEngine

        return HFEngine(**config)
    if name == "vllm":
        from agents.engines.vllm import VLLMEngine

        return VLLMEngine(**config)
    if name == "openai":
        from agents.engines.openai_compat import OpenAIEngine

        return OpenAIEngine(**config)
    raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
