"""Answers math-verify calls equal that the MATH / AIME grading conventions do not accept.

math-verify compares *values*, and reads an equation answer by its last side. Three ways a
reply earns a value it did not state (each returns the reason, or None when the form is fine):

* **a false equation** (``204 = 211`` for the gold 211): math-verify takes the last side, so
  a reply could assert two numbers at once. Every equation in the answer whose two sides are
  both numbers must hold (``200 + 11 = 211``, ``\\sqrt{4} = 2`` and ``x = 211`` are fine).
* **an unfinished computation for an integer gold** (``99\\cdot99+99+1`` for 9901, ``2^{10}``
  for 1024, ``3!`` for 6): the PRM800K grader that made MATH-500 requires an integer-written
  answer when the gold is an integer, and AIME answers are integers. A number, a percentage of
  one, a unit or ``x =`` in front stay fine (``9{,}901``, ``9901.0``, ``9901\\text{ ways}``).
* **a decimal approximation of an exact gold** (``1.414214`` for ``\\sqrt{2}``, ``0.333333``
  for ``\\frac13``): math-verify rounds both to 6 decimals. When the gold has no decimal in it,
  the answer's decimals are read exactly (``0.5`` still equals ``\\frac12``, ``1.5\\sqrt2``
  equals ``\\frac{3\\sqrt2}{2}``, ``9901.0`` equals 9901). A gold written as a decimal keeps
  math-verify's rounding, to at least the gold's own decimals (:func:`gold_rounding`: 0.000067
  is not ``.0000672``). A gold written ``27.0`` (AMC23's integers) is an integer.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["gold_rounding", "join_digit_groups", "plain_number_text", "refused_form"]

_DECIMALS = re.compile(r"\.(\d+)")
_WORD_SUBSCRIPT = re.compile(r"_\{\s*\\(?:text|textrm|mathrm|mbox)\s*\{(\w+)\}\s*\}")
_UNIT_TEXT = re.compile(r"\\(?:text|textrm|textnormal|textbf|mathrm|mbox|operatorname)\s*\{[^{}0-9]*\}"
                        r"(?:\^\{?[23]\}?)?")
_TEXT_COMMAND = re.compile(r"\\(?:text|textrm|textnormal|textbf|mathrm|mathbf|mbox|boxed)\s*\{([^{}]*)\}")
_DECORATION = re.compile(r"\\(?:left|right|displaystyle)\b|\\[,;! ]|~|\s+|\\?\$|\\?%|\^\{?\\circ\}?")
_WRAPPERS = ((r"\{", r"\}"), ("(", ")"), ("{", "}"), ("[", "]"))
# thousands written with a thin space or a plain one (``9\\,901``, ``1\\;000\\;000``, ``9 901``): math-verify
# reads the groups as a sum (9 + 901 = 910); after a decimal point only LaTeX spacing groups digits
_TEX_GROUP_SPACE = r"(?:\s*(?:\\[,;:! ]|\\thinspace\b|~|\{\\,\})\s*)"
_INTEGER_GROUPS = re.compile(r"(?<![\d.])\d{1,3}(?:(?:" + _TEX_GROUP_SPACE + r"|\s+)\d{3}(?!\d))+(?![\d])")
_DECIMAL_GROUPS = re.compile(r"(?<=\d\.)\d{3}(?:" + _TEX_GROUP_SPACE + r"\d{3}(?!\d))*(?:" + _TEX_GROUP_SPACE
                             + r"\d{1,3})(?!\d)")
_INTEGER_NUMERAL = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:_\{?(?:10|ten)\}?)?")


def join_digit_groups(text: str) -> str:
    """``text`` with the spaces that group a number's digits in threes removed (``9\\,901`` ->
    ``9901``, ``3.141\\,59`` -> ``3.14159``), as LaTeX renders them: a thin space is how MATH and
    SI write thousands, and math-verify reads the groups as separate numbers added up (9 + 901).
    Digits not grouped in threes (``3 4``) are left as they are."""
    def joined(match: re.Match[str]) -> str:
        return re.sub(r"\D", "", match.group(0))

    return _DECIMAL_GROUPS.sub(joined, _INTEGER_GROUPS.sub(joined, text))


def plain_number_text(text: str) -> str:
    """``text`` as a number is written, without what does not change it: spacing, dollar and
    percent signs, degrees, words (``\\text{ ways}``, ``\\mathrm{cm}^2``), ``{,}`` and the
    wrappers of one element (``(9901)``, ``\\{9901\\}``, ``\\text{9901}``)."""
    text = _WORD_SUBSCRIPT.sub(lambda m: "_{" + m.group(1) + "}", join_digit_groups(text))
    text = _UNIT_TEXT.sub("", text)
    text = _TEXT_COMMAND.sub(lambda m: m.group(1), text)
    text = _DECORATION.sub("", text).replace("{,}", ",").rstrip(".")
    changed = True
    while changed:
        changed = False
        for opener, closer in _WRAPPERS:
            if text.startswith(opener) and text.endswith(closer) and len(text) > len(opener) + len(closer):
                inner = text[len(opener):-len(closer)]
                if not any(c in inner for c in "(){}[];,") or _INTEGER_NUMERAL.fullmatch(inner):
                    text, changed = inner, True
    return text


def _integer_written(text: str, value: Any = None) -> bool:
    """The answer's last side is an integer numeral (``9{,}901``, ``9901.0``, ``x = 9901``,
    ``\\$9901``), not a form math-verify evaluated while parsing (``\\frac{19802}{2}``, ``4/2``,
    ``\\binom{5}{2}``, ``-(-3)``); with ``value``, a numeral of that value (math-verify reads
    ``3 4`` as 3 + 4, which written without the space is 34)."""
    last = plain_number_text(plain_number_text(text).rsplit("=", 1)[-1])
    if not _INTEGER_NUMERAL.fullmatch(last):
        return False
    if value is None:
        return True
    numeral = re.sub(r"_\{?(?:10|ten)\}?$", "", last).replace(",", "")
    return float(numeral) == int(_percent_number(value))


def _percent_number(value: Any) -> Any:
    """The number of a percentage (50 for math-verify's ``50 * (1/100)``, the parse of ``50\\%``),
    as MATH's grader reads it: it drops the percent sign. Other values are returned as they are."""
    from math_verify.grader import is_atomic_or_pct_atomic
    from sympy import Mul, Number

    if isinstance(value, Mul) and is_atomic_or_pct_atomic(value, Number):
        return value.args[0]
    return value


def _integer_elements(value: Any) -> bool:
    """A tuple or set of integers ("(8,-2)", "3, 5, 7"): PRM800K grades each element as an answer."""
    from sympy import FiniteSet, Integer, Tuple

    return isinstance(value, FiniteSet | Tuple) and len(value) > 1 and all(isinstance(e, Integer) for e in value)


def _elements(text: str) -> list[str]:
    """The top-level comma-separated pieces of an answer, without its outer brackets (the last
    side of ``(x, y) = (8, -2)``)."""
    plain = plain_number_text(text)
    last_side = plain.rsplit("=", 1)[-1]
    if last_side != plain and last_side[:1] in "([\\":
        plain = last_side
    for opener, closer in (*_WRAPPERS, ("\\langle", "\\rangle")):
        if plain.startswith(opener) and plain.endswith(closer):
            plain = plain[len(opener):-len(closer)]
            break
    pieces, depth, start = [], 0, 0
    for index, char in enumerate(plain):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            pieces.append(plain[start:index])
            start = index + 1
    return pieces + [plain[start:]]


def gold_rounding(gold: str, rounding: int) -> int:
    """Decimal places to compare at: math-verify's ``rounding``, or more when the gold is written
    with more (rounding ``.0000672`` to 6 places paid 0.000067 and 0.0000671)."""
    return max([rounding] + [len(digits) for digits in _DECIMALS.findall(gold)])


def _numbers_differ(left: Any, right: Any, timeout: int, rounding: int) -> bool:
    from math_verify import verify

    if not (getattr(left, "is_number", False) and getattr(right, "is_number", False)):
        return False  # a side with a variable or an unknown function: an assignment, not a claim
    try:
        return not verify(left, right, float_rounding=rounding, timeout_seconds=timeout)
    except Exception:
        return False


def _false_equation(value: Any, timeout: int, rounding: int) -> bool:
    from sympy import Basic, Eq

    if not isinstance(value, Basic):
        return False
    equations = [value] if isinstance(value, Eq) else []
    try:
        equations += list(value.atoms(Eq))
    except Exception:
        return False
    return any(_numbers_differ(eq.lhs, eq.rhs, timeout, rounding) for eq in equations)


def _last_side(value: Any) -> Any:
    """The value math-verify compares for an equation answer: its last right-hand side."""
    from sympy import And, Eq

    while isinstance(value, And | Eq):
        value = value._unsorted_args[-1] if isinstance(value, And) else value.rhs
    return value


def _integral_as_integer(value: Any) -> Any:
    """A gold written ``27.0`` (AMC23 ships its integer answers so) is the integer 27."""
    from sympy import Float, Integer

    if isinstance(value, Float) and value.is_finite and float(value).is_integer():
        return Integer(int(value))
    return value


def _is_integer_value(value: Any) -> bool:
    from math_verify.grader import is_atomic_or_pct_atomic
    from sympy import Integer

    return is_atomic_or_pct_atomic(value, Integer)


def _written_as_a_number(value: Any) -> bool:
    from math_verify.grader import is_atomic_or_pct_atomic
    from sympy import Basic, FiniteSet, Number, Tuple

    while isinstance(value, FiniteSet | Tuple) and len(value) == 1:
        value = next(iter(value))  # a one-element set or tuple ("\\{211\\}") is that element
    if not isinstance(value, Basic):
        return True
    return bool(value.is_Atom or is_atomic_or_pct_atomic(value, Number))


def _floats(value: Any) -> set[Any]:
    from sympy import Basic, Float

    if not isinstance(value, Basic):
        return set()
    try:
        return set(value.atoms(Float))
    except Exception:
        return set()


def _approximates(gold: Any, answer: Any, timeout: int) -> bool:
    """The answer holds decimals, the gold none, and read exactly they are not the gold."""
    from math_verify import verify
    from sympy import Rational

    floats = _floats(answer)
    if not floats or _floats(gold):
        return False
    try:
        exact = answer.xreplace({f: Rational(str(f)) for f in floats})
        return not verify(gold, exact, float_rounding=15, timeout_seconds=timeout)
    except Exception:
        return False


def refused_form(gold: list[Any], answer: tuple[str, list[Any]], timeout: int, rounding: int) -> str | None:
    """Why an answer (text, parse) math-verify found equal to ``gold`` (its parse) does not count,
    or None. Only the first parsed value of each is judged, the one math-verify compares first."""
    if not gold or not answer[1]:
        return None
    gold_value, value = _integral_as_integer(gold[0]), answer[1][0]
    if _false_equation(value, timeout, rounding):
        return "the answer states a false equation (two different numbers set equal)"
    last = _last_side(value)
    if _is_integer_value(gold_value) and not (_written_as_a_number(last) and _integer_written(answer[0], gold_value)):
        return "the gold is an integer and the answer is an unfinished computation, not an integer"
    if _integer_elements(gold_value) and not all(_integer_written(piece) for piece in _elements(answer[0])):
        return "the gold's elements are integers and an element of the answer is not written as one"
    from math_verify.grader import is_relation

    if _approximates(gold_value, value if is_relation(gold_value) else last, timeout):
        return "the answer is a decimal approximation of an exact gold"
    return None
