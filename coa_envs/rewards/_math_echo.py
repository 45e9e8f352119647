"""An answer that hands the question's own expression back ("Simplify $\\sqrt{242}$" ->
``\\boxed{\\sqrt{242}}``; "Compute $513^2 - 487^2$" -> ``\\boxed{513^2 - 487^2}``).

math-verify compares values, so such an answer equals the gold (``11\\sqrt2``, ``26000``)
although nothing was simplified or computed: on MATH-500 it paid on 35 of 500 problems (7 %)
with no work at all. The question asked for the value in another form, and that form is the
gold's, so an answer that *is* one of the question's expressions scores only when it is also
written like a gold answer (:func:`restates_question`).

"Is" means the same parsed structure, not the same text: math-verify's parse keeps the
expression unevaluated (``513^2-487^2`` stays a difference of powers), so ``(513)^{2}-487^2``
or ``\\dfrac`` for ``\\frac`` are the same expression, and ``26000`` is not. Atoms (a number, a
fraction, a letter, ``\\pi``) never count as restated: a question that mentions 13 may well
have 13 as its answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

__all__ = ["question_structures", "restates_question", "spelling", "structure"]

_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_TRAILING = re.compile(r"(?:\s|[.,;:?]|\\[,;!]|\\quad)+$")
_SPACE = re.compile(r"\s+")
_WRAPPER = re.compile(r"\\(?:left|right|displaystyle)\b|\\[,;!]")
_UNITS = re.compile(r"\^\{?\\circ\}?|\\%|%")
_OPERATION = re.compile(r"[-+*/^!_]|\\[A-Za-z]+")
_MAX_SPANS, _MAX_SPAN_CHARS = 40, 400  # bounds the parsing one question costs


def _is_plain(value: Any) -> bool:
    """An integer, a letter or a constant (``\\pi``): what a question may mention and an answer be."""
    if not value.is_Atom:
        return False
    integral_float = value.is_Float and value.is_finite and float(value).is_integer()  # sympy: Float(13) != 13
    return bool(value.is_Integer or not value.is_Number or integral_float)


def _without_padding(expr: Any) -> Any:
    """``expr`` without operations that leave a value as it is (``+ 0``, ``\\cdot 1``, ``^1``,
    ``/1``, ``--x``), so that padding does not disguise a restated expression."""
    from sympy import Add, Mul, Pow

    if not expr.args:
        return expr
    args = [_without_padding(arg) for arg in expr.args]
    if expr.func is Add or expr.func is Mul:
        identity = 0 if expr.func is Add else 1
        args = [a for a in args if not (a.is_Number and a == identity) and not _is_unit_power(a)]
        if expr.func is Mul and sum(1 for a in args if a.is_Number and a == -1) % 2 == 0:
            args = [a for a in args if not (a.is_Number and a == -1)]
        if len(args) <= 1:
            return args[0] if args else (expr.func.identity)
    elif expr.func is Pow and args[1].is_Number and args[1] == 1:
        return args[0]
    return expr.func(*args, evaluate=False)


def _is_unit_power(expr: Any) -> bool:
    """``1^{-1}`` (what ``\\frac{x}{1}`` parses into)."""
    return bool(expr.is_Pow and expr.args[0].is_Number and expr.args[0] == 1)


def structure(value: list[Any]) -> str | None:
    """The parsed expression's structure (``srepr``, padding removed), or None for a plain atom or
    nothing parsed. A non-integer number counts ("Write $\\frac{3}{20}$ as a decimal")."""
    from sympy import Basic, srepr

    if not value or not isinstance(value[0], Basic):
        return None
    try:
        expr = _without_padding(value[0])
    except Exception:  # an expression sympy cannot rebuild: compare it as parsed
        expr = value[0]
    return None if _is_plain(expr) else srepr(expr)


def spelling(text: str) -> str | None:
    """The text of an expression that math-verify evaluates while parsing (``\\binom{31}{28}``
    parses as 4495), compacted; None for text with no operation in it (``60^\\circ``, ``-5``)."""
    compact = _SPACE.sub("", _WRAPPER.sub("", text))
    compact = compact.replace(r"\dbinom", r"\binom").replace(r"\tbinom", r"\binom").replace(r"\dfrac", r"\frac")
    operation = _UNITS.sub("", compact).lstrip("+-")
    return compact if _OPERATION.search(operation) else None


def _pieces(question: str) -> list[str]:
    """Each math span of the question, and each side of an equation in it."""
    pieces: list[str] = []
    for match in list(_MATH_SPAN.finditer(question))[:_MAX_SPANS]:
        span = _TRAILING.sub("", next(g for g in match.groups() if g is not None)).strip()
        if not span or len(span) > _MAX_SPAN_CHARS:
            continue
        pieces.append(span)
        if "=" in span:
            pieces += [side.strip() for side in span.split("=") if side.strip()]
    return list(dict.fromkeys(pieces))


Parse = Callable[[str, int], list[Any]]


@lru_cache(maxsize=512)
def question_structures(question: str, timeout: int, parse: Parse) -> frozenset[str]:
    """The structures of the question's expressions (``parse(text, timeout)``: math-verify's
    parse); cached, since the K samples of one task share their question."""
    keys = [key for piece in _pieces(question or "") for key in _keys(piece, parse(piece, timeout))]
    return frozenset(keys)


def _keys(text: str, value: list[Any]) -> list[str]:
    """How an expression is recognised: its structure, and its spelling where parsing evaluated it."""
    shape = structure(value)
    if shape is not None:
        return [f"structure:{shape}"]
    written = spelling(text) if value else None
    return [f"spelling:{written}"] if written is not None else []


def restates_question(answer: tuple[str, list[Any]], golds: list[tuple[str, list[Any]]],
                      question_keys: frozenset[str]) -> bool:
    """True when ``answer`` (text, parse) is one of the question's expressions and no gold is
    written that way: an answer that leaves the question's expression as it was."""
    keys = set(_keys(*answer)) & question_keys
    return bool(keys) and not any(keys & set(_keys(*gold)) for gold in golds)
