"""The continuous-batching scenario the CPU engine tests and the CUDA tests both run.

A long request decodes with eos switched off (it runs its whole budget); once it has produced
three tokens a short request is sent from another thread. Under continuous batching the short
one joins the running batch and finishes first, and it samples what it samples alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agents.engines import GenerationRequest, SamplingParams
from agents.engines.batching import BatchingEngine


def short_request_mid_decode(make_engine: Callable[[], Any], short: GenerationRequest,
                             long_ids: list[int], long_params: SamplingParams) -> dict[str, Any]:
    """Run the scenario on engines from ``make_engine`` (each with eos off). Returns the long
    completion, the order the two finished in (``["short", "long"]`` when the short one was
    admitted mid-decode), the short completion and the short request's completion alone."""

    def engine_without_eos() -> Any:
        engine = make_engine()
        engine.eos_ids = frozenset()
        return engine

    batcher = BatchingEngine(engine_without_eos())
    long_tokens: list[int] = []
    finished: list[str] = []
    short_result: list[Any] = []

    def send_short() -> None:
        short_result.append(batcher.generate([short], SamplingParams())[0])
        finished.append("short")

    sender = threading.Thread(target=send_short)

    def on_token(token: int, logprob: float) -> None:
        long_tokens.append(token)
        if len(long_tokens) == 3:
            sender.start()

    long = GenerationRequest(token_ids=tuple(long_ids), params=long_params, on_token=on_token)
    try:
        (long_completion,) = batcher.generate([long], SamplingParams())
        finished.append("long")
        sender.join(timeout=60)
    finally:
        batcher.close()
    (alone,) = engine_without_eos().generate([short], SamplingParams())
    return {"long": long_completion, "finished": finished, "short": short_result[0] if short_result else None,
            "alone": alone}
