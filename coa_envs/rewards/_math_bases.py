"""Numerals written in another base (``52_8``, ``4210_{5}``, ``(10101)_2``), read as MATH writes them.

MATH has base-n problems ("Find $6_8 \\cdot 7_8$. Express your answer in base 8.", gold ``52_8``).
math-verify drops the subscript and reads ``52_8`` as the decimal 52, so any base paid the gold's
digits (``52_9`` and ``52_{10}`` for ``52_8``) and ``52_8`` paid a decimal gold of 52. A numeral
is therefore judged by its digits *and* its base (:func:`base_verdict`):

* a gold written in base b pays the same numeral in base b, with or without the subscript (the
  question asked for base b: ``52``, ``52_{8}``, ``52_{\\text{eight}}``, ``(52)_8``, ``x = 52_8``);
  the same number in another base (``42``, ``101010_2``) or other digits is wrong;
* a gold written in base ten is paid by no answer holding a numeral in another base, equal value
  or not: PRM800K's grader requires an integer gold's answer to be written as an integer, such a
  question asks for base ten ("What's the largest eight-digit base 2 integer? Express your answer
  in base 10."), and in a conversion problem ("What is $52_8$ in base ten?") the numeral is the
  question's own, handed back.
"""

from __future__ import annotations

import re

from coa_envs.rewards._math_forms import plain_number_text

__all__ = ["base_numeral", "base_verdict"]

_NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                 "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
                 "sixteen": 16}
_ASSIGNMENT = re.compile(r"^[A-Za-z]=")
_SUBSCRIPT = r"_(?:\{\(?([0-9a-z]+)\)?\}|([0-9]))"
# one numeral: digits (bracketed or not), then _b, _{b} or _{(b)}
_NUMERAL = re.compile(r"[({]?([0-9A-Z]+)[)}]?" + _SUBSCRIPT)
# a numeral anywhere in an answer: starts with a decimal digit, not an index (x_1, \log_2)
_NUMERAL_INSIDE = re.compile(r"(?<![A-Za-z\\}])[({]?([0-9][0-9A-Z]*)[)}]?" + _SUBSCRIPT)


def _plain(text: str) -> str:
    """:func:`plain_number_text` without a leading ``x =`` (an assignment names the value)."""
    return _ASSIGNMENT.sub("", plain_number_text(text))


def _base(match: re.Match[str]) -> int | None:
    written = match.group(2) or match.group(3)
    base = int(written) if written.isdigit() else _NUMBER_WORDS.get(written)
    if base is None or not 2 <= base <= 36:
        return None
    try:
        int(match.group(1), base)
    except ValueError:
        return None
    digits = match.group(1)
    # a numeral has a decimal digit: letters alone (B_{12}, A_{11}) name a point or an entry
    return base if digits.isdigit() or (base > 10 and any(ch.isdigit() for ch in digits)) else None


def base_numeral(text: str) -> tuple[str, int] | None:
    """``(digits, base)`` when ``text`` is one numeral with a base subscript whose digits are valid
    in that base (``52_8`` -> ("52", 8)); None otherwise (``x_1``, ``a_5``, ``\\log_2 8``)."""
    match = _NUMERAL.fullmatch(_plain(text))
    base = _base(match) if match else None
    return (match.group(1), base) if match and base else None


def _bases_inside(text: str) -> set[int]:
    """The bases other than ten of every numeral written anywhere in ``text``."""
    bases = {_base(match) for match in _NUMERAL_INSIDE.finditer(_plain(text))}
    return {base for base in bases if base and base != 10}


def base_verdict(gold: str, answer: str) -> tuple[bool, str] | None:
    """Whether ``answer`` matches ``gold`` by their bases, with the reason when it does not;
    None when neither is written in a base other than ten (math-verify decides)."""
    gold_numeral = base_numeral(gold)
    if gold_numeral is None or gold_numeral[1] == 10:
        others = _bases_inside(answer)
        return (False, f"the answer is written in base {min(others)}, the gold in base ten") if others else None
    digits, base = gold_numeral
    written = base_numeral(answer)
    if written is None:
        bare = _plain(answer)
        if re.fullmatch(r"[0-9A-Z]+", bare) and _same_numeral(bare, digits, base):
            return True, ""
        return False, f"the gold is written in base {base} and the answer is not that numeral"
    if written[1] != base:
        return False, f"the answer is written in base {written[1]}, the gold in base {base}"
    return _same_numeral(written[0], digits, base), f"the answer is another base-{base} numeral"


def _same_numeral(digits: str, gold_digits: str, base: int) -> bool:
    try:
        return int(digits, base) == int(gold_digits, base)
    except ValueError:
        return False
