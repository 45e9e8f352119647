"""Math equivalence with HuggingFace ``math-verify``, with a fallback that never crashes.

The answer text is the content of ``<answer>``; ``\\boxed{…}`` inside it is accepted (the
seed's prompt asks for it), as is a bare expression. math-verify guards its parsing with
``signal.alarm``, which only works on a main thread. Off the main thread (rollout workers,
``coa eval --concurrency``) the check runs in a small helper process, on that process's
main thread, with the same timeouts; a pathological answer that stalls sympy then costs a
killed helper, never a hung rollout worker.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from coa_envs.types import RewardResult, Task

__all__ = ["VERSION", "MathVerifyReward", "build", "normalise_latex"]

VERSION = 1  # bump when the scores this term gives change (reported in reward_details)

_SPACE_RE = re.compile(r"\s+")
_WRAPPERS = (r"\left", r"\right", r"\!", r"\,", r"\;", r"\displaystyle", "$")


def normalise_latex(text: str) -> str:
    """String-level normal form used when math-verify cannot parse either side."""
    text = text.strip()
    boxed = _last_boxed(text)
    if boxed is not None:
        text = boxed
    for token in _WRAPPERS:
        text = text.replace(token, "")
    text = text.replace(r"\dfrac", r"\frac").replace(r"\tfrac", r"\frac")
    text = _SPACE_RE.sub("", text).rstrip(".")
    return text


def _last_boxed(text: str) -> str | None:
    start = text.rfind(r"\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len(r"\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


class MathVerifyReward:
    """Reward 1 when the answer is mathematically equal to any gold answer."""

    def __init__(self, float_rounding: int = 6, timeout_s: int = 5):
        self.float_rounding = float_rounding
        self.timeout_s = timeout_s

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        details: dict[str, Any] = {"method": "math_verify"}
        if not prediction or not prediction.strip():
            return RewardResult(0.0, {**details, "reason": "empty answer"})
        on_main = threading.current_thread() is threading.main_thread()
        for gold in task.gold:
            try:
                if on_main:
                    matched = _verify(gold, prediction, self.timeout_s, self.float_rounding)
                else:
                    matched = _verify_in_helper(gold, prediction, self.timeout_s, self.float_rounding)
                if matched:
                    return RewardResult(1.0, {**details, "matched_gold": gold})
            except Exception as exc:  # math-verify/sympy can fail on odd LaTeX
                details["math_verify_error"] = f"{type(exc).__name__}: {exc}"[:300]
            if normalise_latex(prediction) == normalise_latex(gold):
                return RewardResult(1.0, {**details, "method": "string_fallback", "matched_gold": gold})
        return RewardResult(0.0, details)


def _verify(gold: str, prediction: str, timeout: int, float_rounding: int) -> bool:
    from math_verify import parse, verify

    kwargs: dict[str, Any] = {"parsing_timeout": timeout}
    gold_parsed = parse(gold if r"\boxed" in gold else f"\\boxed{{{gold}}}", **kwargs)
    if not gold_parsed:
        gold_parsed = parse(f"${gold}$", **kwargs)
    pred_parsed = parse(prediction, **kwargs)
    if not pred_parsed:
        pred_parsed = parse(f"${prediction}$", **kwargs)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, float_rounding=float_rounding, timeout_seconds=timeout))


_helper: ProcessPoolExecutor | None = None
_helper_lock = threading.Lock()


def _helper_pool() -> ProcessPoolExecutor:
    global _helper
    with _helper_lock:
        if _helper is None:
            import multiprocessing

            # forkserver: forking a process that runs threads (the caller's) can deadlock.
            _helper = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver"))
        return _helper


def _drop_helper(broken: ProcessPoolExecutor) -> None:
    global _helper
    with _helper_lock:
        if _helper is broken:
            _helper = None
    for process in list(getattr(broken, "_processes", {}).values()):
        process.kill()
    broken.shutdown(wait=False, cancel_futures=True)


def _verify_in_helper(gold: str, prediction: str, timeout: int, float_rounding: int) -> bool:
    pool = _helper_pool()
    future = pool.submit(_verify, gold, prediction, timeout, float_rounding)
    try:
        # math-verify's own alarms fire inside the helper; the margin covers a stuck helper.
        return future.result(timeout=2 * timeout + 5)
    except FutureTimeout:
        _drop_helper(pool)
        raise TimeoutError(f"math-verify did not finish within {2 * timeout + 5} s") from None
    except BrokenProcessPool:  # the helper died (e.g. out of memory); the next call starts a new one
        _drop_helper(pool)
        raise


def build(float_rounding: int = 6, timeout_s: int = 5) -> MathVerifyReward:
    return MathVerifyReward(float_rounding=float_rounding, timeout_s=timeout_s)
