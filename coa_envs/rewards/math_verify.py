"""Math equivalence with HuggingFace ``math-verify``: one final answer per reply.

The answer text is the content of ``<answer>``. Its *candidates* are every ``\\boxed{…}`` /
``\\fbox{…}`` in it and every "final answer is X" / "answer is X" / "answer: X"; a reply that
states none is one candidate as a whole. Official graders extract one answer, so:

* **several distinct candidates are wrong** (``\\boxed{204} The final answer is $211$``): a
  reply may repeat its answer, not offer two; a value offered in prose beside it
  ("Alternatively, 204", "or possibly $204$", "if not, 204") is a candidate too;
* **alternatives inside one answer form a set** ("204 or 211", ``204 \\lor 211``, "204; 211",
  "either 204 or 211"): right only when the gold answer is that set (``\\pm 5`` = "5 or -5");
* each candidate is parsed whole (as ``\\boxed{candidate}``) and compared with math-verify; the
  string comparison (:func:`normalise_latex`) runs **only when math-verify cannot parse** one
  side, never as a second chance after math-verify said "not equal";
* **the question's own expression handed back is wrong** ("Simplify $\\sqrt{242}$" ->
  ``\\sqrt{242}``), unless a gold answer is written that way (:mod:`._math_echo`).

math-verify guards its parsing with ``signal.alarm``, which only works on a main thread. Off
the main thread (rollout workers, ``coa eval --concurrency``) the check runs in a small helper
process, on that process's main thread, with the same timeouts; a pathological answer that
stalls sympy then costs a killed helper, never a hung rollout worker.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from coa_envs.process_pools import kill_pool, owned_pool
from coa_envs.rewards._math_bases import base_verdict
from coa_envs.rewards._math_echo import question_structures, restates_question
from coa_envs.rewards._math_forms import gold_rounding, refused_form
from coa_envs.rewards._math_parse import RETRY_FACTOR, verify_values
from coa_envs.rewards._math_parse import parse_boxed as _parse
from coa_envs.rewards.base import RewardUnavailable
from coa_envs.rewards.em_f1 import extract_answer
from coa_envs.types import RewardResult, Task

__all__ = ["VERSION", "MathVerifyReward", "answer_candidates", "build", "normalise_latex"]

VERSION = 12  # bump when the scores this term gives change (reported in reward_details)
# 2: one final answer per reply (several distinct candidates are wrong, alternatives form a
#    set); the string fallback only when math-verify cannot parse (no OR of two verdicts)
# 3: a value offered in prose beside the answer ("Alternatively, 3") is a second answer
# 4: the question's own expression handed back ("Simplify sqrt(242)" -> sqrt(242)) is wrong
# 5: padding (+ 0, \cdot 1, ^1, /1, --x) does not disguise the question's expression
# 6: an escaped dollar sign inside $...$ ("the answer is $\$18.90$") no longer ends the formula
# 7: MATH/AIME answer forms (._math_forms): a false equation ("204 = 211"), an unfinished
#    computation for an integer gold ("99\cdot99+99+1"), a decimal approximation of an exact gold;
#    a decimal gold is compared to at least its own decimals (0.000067 is not .0000672)
# 8: an integer written with a decimal point that the question mentions ("13.0") may be the answer,
#    as an integer may (sympy's Float == int is False, so it read as the question's expression)
# 9: an integer gold needs an integer-written answer also where math-verify evaluates while parsing
#    (\frac{4}{2}, 4/2, \binom{5}{2}, -(-3) for 2, 10, 3), as PRM800K grades; a numeral in another
#    base is read with its base (52_9 and 52_{10} no longer pay 52_8, nor 52_8 a decimal 52)
# 10: the integer an integer gold's answer is written as must be the gold's value: math-verify reads
#    "3 4" as 3 + 4 (paid 7) and drops text holding a second number ("4 \text{ (maybe 3)}" paid 4)
# 11: more prose hedges are second answers: "maybe", "perhaps", "possibly", "probably", "else",
#    "(or $x$)", "or $x$", "another candidate: x", also inside a box ("\text{ (maybe } x \text{)}")
# 12: digits grouped by spaces are one number ("9\,901" is 9901, read as 9 + 901 before); a percent
#    gold ("8\%") no longer raises on other answers; letters with a subscript (B_{12}) are no
#    base-n numeral; a reply with <answer> tags is read from its last <answer> span; a percentage
#    gold ("62.5%") is paid by its number ("62.5"), as MATH's grader drops the sign

_SPACE_RE = re.compile(r"\s+")
_WRAPPERS = (r"\left", r"\right", r"\!", r"\,", r"\;", r"\displaystyle", "$")
_BOX_OPENERS = (r"\boxed{", r"\fbox{")
# "final answer is X", "the answer is X", "answer: X"; X runs to the end of the sentence.
_PHRASE_RE = re.compile(r"\banswer\s*(?:is|:|=)\s*", re.IGNORECASE)
_WORD_RE = re.compile(r"[A-Za-z]{3,}")
# a second answer offered in prose: "Final answer: 2. Alternatively, 3" / "or possibly 3"
_HEDGE_RE = re.compile(r"(?:\b(?:alternatively|or possibly|or maybe|or perhaps|otherwise|if not,?|possibly|maybe"
                       r"|perhaps|probably|else|another (?:candidate|possibility|option|answer|value)(?: is)?)\b"
                       r"|\(\s*or\b|\bor(?=\s*(?:\$|\\\(|\\boxed)))[\s,:]*"
                       r"(?:(?:it|the answer|x)\s+(?:is|could be|may be|might be|=)\s*)?", re.IGNORECASE)
# inline math ends at the first "$" that is not an escaped dollar sign ("$\\$18.90$" is one formula)
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$((?:\\\$|[^$])+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_ALTERNATIVE_WORDS = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{\s*(or|and)\s*\}|\\lor\b|\\vee\b", re.IGNORECASE)
_OR_SPLIT = re.compile(r"\s*\bor\b\s*|\s+\|\s+|;", re.IGNORECASE)


def normalise_latex(text: str) -> str:
    """String-level normal form used when math-verify cannot parse either side."""
    text = text.strip()
    boxed = _boxed_contents(text)
    if boxed:
        text = boxed[-1]
    for token in _WRAPPERS:
        text = text.replace(token, "")
    text = text.replace(r"\dfrac", r"\frac").replace(r"\tfrac", r"\frac")
    text = _SPACE_RE.sub("", text).rstrip(".")
    return text


def _boxed_contents(text: str) -> list[str]:
    """The content of every ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces), in order."""
    found: list[tuple[int, str]] = []
    for opener in _BOX_OPENERS:
        start = text.find(opener)
        while start >= 0:
            depth, begin = 0, start + len(opener) - 1
            for j in range(begin, len(text)):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        found.append((start, text[begin + 1 : j]))
                        break
            start = text.find(opener, start + 1)
    return [content for _, content in sorted(found)]


def _unwrap(candidate: str) -> str:
    text = candidate.strip()
    match = _MATH_SPAN.fullmatch(text)
    if match:
        text = next(g for g in match.groups() if g is not None)
    return text.strip().rstrip(".").strip()


def _leading_expression(rest: str) -> str:
    """What follows "answer is": up to the end of the sentence, or a ", " / "; " outside brackets
    ("42, since 6 x 7 = 42" -> "42"; "(1, 2)." -> "(1, 2)")."""
    depth = 0
    for index, char in enumerate(rest):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "\n" or (char in ".;," and depth == 0 and rest[index + 1 : index + 2] in (" ", "\n", "")):
            return rest[:index]
    return rest


def _without_boxes(text: str) -> str:
    for opener in _BOX_OPENERS:
        for content in _boxed_contents(text):
            text = text.replace(f"{opener}{content}}}", " ")
    return text


def _phrase_answers(text: str) -> list[str]:
    answers = []
    for match in _PHRASE_RE.finditer(text):
        rest = text[match.end():]
        span = _MATH_SPAN.match(rest)
        answer = span.group(0) if span else _leading_expression(rest)
        if any(opener in answer for opener in _BOX_OPENERS):
            # the boxes count on their own; what is left beside them counts if it holds a number
            # ("the answer is 211 \\boxed{204}" states two answers, "is therefore \\boxed{7}" one)
            answer = _without_boxes(answer)
            if not any(char.isdigit() for char in answer):
                continue
        if _unwrap(answer):
            answers.append(answer)
    return answers


def answer_candidates(text: str) -> list[str]:
    """Every final answer the reply states (see the module docstring), unwrapped, in order."""
    found = _boxed_contents(text) + _phrase_answers(text)
    candidates = [_unwrap(c) for c in (found or [text])]
    return [c for c in candidates if c]


def _alternatives(candidate: str) -> list[str]:
    """The parts of "A or B" / ``A \\lor B`` / "A; B" (one part when there is no alternative)."""
    text = _ALTERNATIVE_WORDS.sub(" or ", candidate)
    parts = [p.strip() for p in _OR_SPLIT.split(text)]
    return [p for p in parts if p] or [candidate]


class MathVerifyReward:
    """Reward 1 when the reply's one final answer is mathematically equal to a gold answer."""

    def __init__(self, float_rounding: int = 6, timeout_s: int = 5):
        self.float_rounding = float_rounding
        self.timeout_s = timeout_s

    def __call__(self, prediction: str, task: Task) -> RewardResult:
        details: dict[str, Any] = {"method": "math_verify"}
        if not prediction or not prediction.strip():
            return RewardResult(0.0, {**details, "reason": "empty answer"})
        prediction = extract_answer(prediction)  # a whole turn is tolerated: its last <answer> span
        args = ([str(g) for g in task.gold], prediction, self.timeout_s, self.float_rounding, task.question)
        if threading.current_thread() is threading.main_thread():
            score, found = _score(*args)
        else:
            score, found = _score_in_helper(*args)
        return RewardResult(score, {**details, **found})


def _same(a: tuple[str, list[Any]], b: tuple[str, list[Any]], timeout: int, rounding: int) -> bool:
    """Equal by math-verify when both parse, else by the string normal form."""
    if a[1] and b[1]:
        return verify_values(a[1], b[1], timeout, rounding)
    return normalise_latex(a[0]) == normalise_latex(b[0])


def _one_value(candidate: str, timeout: int, rounding: int) -> tuple[str, list[Any]]:
    """A candidate as one value; distinct alternatives inside it become the set of them."""
    parts = _alternatives(candidate)
    lines = [line.strip() for line in candidate.splitlines() if line.strip()]
    if len(parts) == 1 and len(lines) > 1 and all(_parse(line, timeout) for line in lines):
        parts = lines  # one value per line: a list of candidates (a matrix's rows do not parse alone)
    if len(parts) == 1:
        return candidate, _parse(candidate, timeout)
    parsed = [(p, _parse(p, timeout)) for p in parts]
    if all(_same(parsed[0], p, timeout, rounding) for p in parsed[1:]):
        return parsed[0]  # "211 or 211" is one answer
    as_set = "\\{" + ", ".join(parts) + "\\}"
    return as_set, _parse(as_set, timeout)


_warmed = False


def _warm() -> None:
    """Load math-verify's parsers once, outside any parse timeout: the first parse imports
    sympy's LaTeX machinery (seconds on a loaded machine), which must not count against the
    timeout of whatever answer happens to be scored first."""
    global _warmed
    if not _warmed:
        from math_verify import LatexExtractionConfig, parse

        parse("\\boxed{\\frac{1}{2}}", extraction_config=[LatexExtractionConfig()], parsing_timeout=120)
        _warmed = True


def _hedged(text: str, timeout: int) -> list[tuple[str, list[Any]]]:
    """Values a reply offers besides its answer in prose ("Alternatively, 3"); only those
    math-verify reads, so that "alternatively written as 4/2" is no second answer unless it is one."""
    found = []
    for match in _HEDGE_RE.finditer(text):
        rest = text[match.end():].lstrip("}) \t")  # the value after "\text{ (maybe }"
        span = _MATH_SPAN.match(rest)
        candidate = _unwrap(span.group(0) if span else _leading_expression(rest))
        while candidate.endswith(")") and candidate.count(")") > candidate.count("("):
            candidate = candidate[:-1].strip()  # "(if not, \frac13)": the aside's own bracket
        if not candidate or _WORD_RE.search(re.sub(r"\\[A-Za-z]+", " ", candidate)):
            continue  # prose ("the expression would be undefined"), not a value
        parsed = _parse(candidate, timeout)
        if parsed:
            found.append((candidate, parsed))
    return found


_PERCENT_GOLD = re.compile(r"^\s*\$?\s*([-+]?\d[\d.,]*)\s*\\?%\s*\$?\s*$")


def _without_percent(gold: str) -> str:
    """A percentage gold's number (``62.5`` for ``62.5%``), which MATH's grader accepts: it drops the
    sign. math-verify pays ``0.625`` for it, and ``8`` for ``8\\%``, but not ``62.5``."""
    match = _PERCENT_GOLD.match(gold)
    return match.group(1) if match else gold


def _score(golds: list[str], prediction: str, timeout: int, rounding: int,
           question: str = "") -> tuple[float, dict[str, Any]]:
    """Score and details; runs in this process or in the helper (arguments and result pickle)."""
    _warm()
    candidates = answer_candidates(prediction)
    details: dict[str, Any] = {"candidates": candidates[:10]}
    if not candidates:
        return 0.0, {**details, "reason": "empty answer"}
    values = [_one_value(c, timeout, rounding) for c in candidates]
    values += _hedged(prediction, timeout)
    if any(not _same(values[0], v, timeout, rounding) for v in values[1:]):
        return 0.0, {**details, "reason": "several different final answers"}
    answer = values[0]
    golds = golds + [bare for bare in map(_without_percent, golds) if bare not in golds]
    gold_values = [(gold, _parse(gold, timeout)) for gold in golds]
    written_as_gold = any(normalise_latex(gold) == normalise_latex(answer[0]) for gold in golds)
    if not written_as_gold and restates_question(answer, gold_values,
                                                 question_structures(question, timeout, _parse)):
        return 0.0, {**details, "reason": "the answer is the question's own expression, not its value"}
    for gold, gold_value in zip(golds, gold_values, strict=True):
        by_base = base_verdict(gold, answer[0])
        if by_base is not None:  # a numeral in another base: its digits and base decide
            if by_base[0]:
                return 1.0, {**details, "method": "base_numeral", "matched_gold": gold}
            details["reason"] = by_base[1]
            continue
        places = gold_rounding(gold, rounding)
        if _same(gold_value, answer, timeout, places):
            refusal = None if written_as_gold else refused_form(gold_value[1], answer, timeout, places)
            if refusal:
                details["reason"] = refusal
                continue
            method = "math_verify" if gold_value[1] and answer[1] else "string_fallback"
            return 1.0, {**details, "method": method, "matched_gold": gold}
    if not answer[1]:
        details["method"] = "string_fallback"
    return 0.0, details


_HELPER_START_S = 300.0
"""How long a fresh helper may take to start (forkserver, importing sympy's LaTeX parser): seconds
on an idle machine, much longer on a loaded one. Not charged to any answer's time limit."""
_helper: tuple[ProcessPoolExecutor, Future] | None = None
_helper_lock = threading.Lock()


def _helper_pool() -> tuple[ProcessPoolExecutor, Future]:
    """The shared helper and the future of its warm-up (done once a helper process is ready)."""
    global _helper
    with _helper_lock:
        if _helper is None:
            import multiprocessing

            # forkserver: forking a process that runs threads (the caller's) can deadlock.
            pool = owned_pool(2, multiprocessing.get_context("forkserver"), initializer=_warm)
            _helper = (pool, pool.submit(_warm))
        return _helper


def _drop_helper(broken: ProcessPoolExecutor) -> None:
    """Retire ``broken`` (kill its processes); several threads may retire the same pool."""
    global _helper
    with _helper_lock:
        if _helper is not None and _helper[0] is broken:
            _helper = None
    kill_pool(broken)


def _result_once_running(future: Future, limit_s: float) -> Any:
    """``future.result()`` with ``limit_s`` counted from when the helper took the call, not from
    when it was queued behind other threads' answers. Raises FutureTimeout past the limit."""
    started: float | None = None
    queued_until = time.monotonic() + _HELPER_START_S
    while True:
        now = time.monotonic()
        if started is None and (future.running() or future.done()):
            started = now
        deadline = queued_until if started is None else started + limit_s
        if now >= deadline:
            raise FutureTimeout()
        try:
            return future.result(timeout=min(0.25, deadline - now) if started is None else deadline - now)
        except FutureTimeout:
            continue


def _score_in_helper(golds: list[str], prediction: str, timeout: int, rounding: int,
                     question: str = "") -> tuple[float, dict[str, Any]]:
    """:func:`_score` in the helper. Another thread's answer may kill the shared helper (its time
    limit) while this one waits: the call is then retried once on a fresh helper, so that only the
    answer that stalled or killed a helper scores 0 for it. A helper that cannot start gives no
    verdict (:class:`RewardUnavailable`: an unscored episode, not a wrong one)."""
    # math-verify's own alarms fire inside the helper; the margin covers a stuck helper and the
    # several parses one reply may need (each candidate, each alternative, each gold).
    limit = (4 + RETRY_FACTOR) * timeout + 10
    for attempt in range(2):
        pool, ready = _helper_pool()
        try:
            ready.result(timeout=_HELPER_START_S)
        except (FutureTimeout, BrokenProcessPool, CancelledError) as exc:
            _drop_helper(pool)
            if attempt:
                raise RewardUnavailable(f"the math-verify helper process did not start: {type(exc).__name__}",
                                        {"method": "math_verify"}) from None
            continue
        try:
            return _result_once_running(pool.submit(_score, golds, prediction, timeout, rounding, question), limit)
        except FutureTimeout:
            _drop_helper(pool)
            return 0.0, {"reason": f"math-verify did not finish within {limit} s"}
        except (BrokenProcessPool, CancelledError, RuntimeError):
            # the helper died (this answer, e.g. out of memory, or another thread's timeout
            # retired it), or was shut down before this call reached it
            _drop_helper(pool)
    return 0.0, {"reason": "the math-verify helper process died on this answer"}


def build(float_rounding: int = 6, timeout_s: int = 5) -> MathVerifyReward:
    return MathVerifyReward(float_rounding=float_rounding, timeout_s=timeout_s)
