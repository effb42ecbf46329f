"""Exact grammars for JSON numbers in a range, and for multiples.

JSON Schema bounds (``minimum``, ``exclusiveMaximum``, …) and ``multipleOf`` are arithmetic, but
over the decimal spelling of a number they are regular languages, so a grammar can enforce them
exactly instead of checking after the fact:

- **Integers in [lo, hi]** (either end may be open) are the classic digit-range construction: split
  by digit count, and within one count compare digit by digit.
- **Decimals** compare by their integer part, then their fraction as a digit string (trailing zeros
  of the bound dropped, so ``0.5`` and ``0.50`` are one bound).
- **Exponent notation** (``1e-05``, as ``json.dumps`` writes small floats) is accepted on a side of
  zero that the range leaves unbounded; on a bounded side only plain decimals are generated and
  accepted (a documented under-approximation: such spellings of in-range values are refused).
- **multipleOf** an integer ``m`` is a divisibility automaton over the digits (one rule per
  remainder); ``multipleOf`` ``10**-k`` limits the fraction to ``k`` significant digits.

The same fixed-width range routine also spells ``\\uXXXX`` escapes for a set of code points.
"""

from __future__ import annotations

import functools
from decimal import Decimal
from fractions import Fraction

from codemask.grammar.ir import (
    EMPTY,
    NOTHING,
    Choice,
    Expr,
    Repeat,
    RuleRef,
    Sequence,
    char_class,
    choice,
    literal,
    seq,
)

DIGIT = char_class([(ord("0"), ord("9"))])
NONZERO = char_class([(ord("1"), ord("9"))])
DIGITS = Repeat(DIGIT, 1, None)
EXPONENT = seq(char_class([(ord("e"), ord("e")), (ord("E"), ord("E"))]),
               Repeat(char_class([(ord("+"), ord("+")), (ord("-"), ord("-"))]), 0, 1), DIGITS)
NATURAL = choice(literal("0"), seq(NONZERO, Repeat(DIGIT, 0, None)))
"""A non-negative integer without leading zeros."""
_NONZERO_FRACTION = seq(literal("."), Repeat(literal("0"), 0, None), NONZERO, Repeat(DIGIT, 0, None))
NON_INTEGER = seq(Repeat(literal("-"), 0, 1), NATURAL, _NONZERO_FRACTION,
                  Repeat(seq(char_class([(ord("e"), ord("e")), (ord("E"), ord("E"))]), literal("-"), DIGITS), 0, 1))
"""Numbers that are not integers: a non-zero fraction, optionally scaled down (``1.5e-05``).

Spellings like ``15e-1`` (also non-integers) are left out: telling them from ``10e-1`` is arithmetic."""


def digit_class(lo: int, hi: int, base: int = 10) -> Expr:
    """The digits ``lo..hi`` of ``base`` (hex digits in either case)."""
    if lo > hi:
        return NOTHING
    ranges: list[tuple[int, int]] = []
    for d in range(lo, hi + 1):
        if d < 10:
            ranges.append((ord("0") + d, ord("0") + d))
        else:
            ranges += [(ord("a") + d - 10, ord("a") + d - 10), (ord("A") + d - 10, ord("A") + d - 10)]
    return char_class(ranges)


def fixed_width_range(lo: int, hi: int, width: int, base: int = 10) -> Expr:
    """Numerals of exactly ``width`` digits (leading zeros included) whose value is in [lo, hi]."""
    if lo > hi:
        return NOTHING
    if width == 0:
        return EMPTY
    unit = base ** (width - 1)
    first_lo, rest_lo = divmod(lo, unit)
    first_hi, rest_hi = divmod(hi, unit)
    if first_lo == first_hi:
        return seq(digit_class(first_lo, first_lo, base), fixed_width_range(rest_lo, rest_hi, width - 1, base))
    alternatives = []
    inner_lo, inner_hi = first_lo, first_hi
    if rest_lo != 0:
        alternatives.append(seq(digit_class(first_lo, first_lo, base),
                                fixed_width_range(rest_lo, unit - 1, width - 1, base)))
        inner_lo += 1
    if rest_hi != unit - 1:
        inner_hi -= 1
    if inner_lo <= inner_hi:
        alternatives.append(seq(digit_class(inner_lo, inner_hi, base), Repeat(digit_class(0, base - 1, base),
                                                                              width - 1, width - 1)))
    if rest_hi != unit - 1:
        alternatives.append(seq(digit_class(first_hi, first_hi, base),
                                fixed_width_range(0, rest_hi, width - 1, base)))
    return choice(*alternatives)


def natural_range(lo: int, hi: int | None) -> Expr:
    """Non-negative integers in [lo, hi] (``hi=None``: unbounded), without leading zeros."""
    lo = max(lo, 0)
    if hi is not None and lo > hi:
        return NOTHING
    alternatives: list[Expr] = []
    if lo == 0:
        alternatives.append(literal("0"))
        lo = 1
    width = len(str(lo))
    top_width = len(str(hi)) if hi is not None else width
    for w in range(width, top_width + 1):
        low = max(lo, 10 ** (w - 1))
        high = 10**w - 1 if hi is None else min(hi, 10**w - 1)
        if low <= high:
            alternatives.append(fixed_width_range(low, high, w))
    if hi is None:
        alternatives.append(seq(NONZERO, Repeat(DIGIT, top_width, None)))
    return choice(*alternatives)


@functools.lru_cache(maxsize=4096)
def integer_range(lo: int | None, hi: int | None) -> Expr:
    """JSON integers in [lo, hi] (``None``: open), ``-0`` included wherever 0 is. (Cached, as the
    other ranges: schemas repeat the same few bounds, and expressions are immutable.)"""
    alternatives = []
    if hi is None or hi >= 0:
        alternatives.append(natural_range(max(lo or 0, 0), hi))
    if lo is None or lo <= 0:
        negative_top = None if lo is None else -lo
        negative_low = 1 if hi is None or hi >= 0 else -hi
        if negative_top is None or negative_low <= negative_top:
            alternatives.append(seq(literal("-"), natural_range(negative_low, negative_top)))
        if (lo is None or lo <= 0) and (hi is None or hi >= 0):
            alternatives.append(literal("-0"))
    return choice(*alternatives)


@functools.lru_cache(maxsize=4096)
def integer_valued(expr: Expr) -> Expr:
    """An integer spelling, optionally with a zero fraction (``3.0`` is an integer in JSON Schema)."""
    return seq(expr, Repeat(seq(literal("."), Repeat(literal("0"), 1, None)), 0, 1))


@functools.lru_cache(maxsize=4096)
def number_range(lo: Fraction | None, lo_inclusive: bool, hi: Fraction | None, hi_inclusive: bool,
                 frac_digits: int | None = None, *, non_integer: bool = False) -> Expr:
    """JSON numbers in the range; ``frac_digits`` caps the significant fraction digits (multipleOf 10**-k).

    ``non_integer`` keeps only numbers with a non-zero fraction (``not: {type: integer}``).
    """
    if lo is not None and hi is not None and (lo > hi or (lo == hi and not (lo_inclusive and hi_inclusive))):
        return NOTHING
    alternatives: list[Expr] = []
    exponent_ok = frac_digits is None and not non_integer
    positive = _unsigned(lo, lo_inclusive, hi, hi_inclusive, frac_digits, non_integer)
    if positive is not None:
        alternatives.append(positive)
        if hi is None and exponent_ok and _covers_zero_side(lo, lo_inclusive):
            alternatives.append(seq(NATURAL, _free_fraction(None), EXPONENT))
    mirrored = _unsigned(None if hi is None else -hi, hi_inclusive, None if lo is None else -lo, lo_inclusive,
                         frac_digits, non_integer)
    if mirrored is not None:
        alternatives.append(seq(literal("-"), mirrored))
        if lo is None and exponent_ok and _covers_zero_side(None if hi is None else -hi, hi_inclusive):
            alternatives.append(seq(literal("-"), NATURAL, _free_fraction(None), EXPONENT))
    return choice(*alternatives)


def _covers_zero_side(lo: Fraction | None, inclusive: bool) -> bool:
    """Whether every number >= 0 is above the bound (so any spelling of one is in range)."""
    return lo is None or lo < 0 or (lo == 0 and inclusive)


def _unsigned(lo: Fraction | None, lo_inclusive: bool, hi: Fraction | None, hi_inclusive: bool,
              budget: int | None, non_integer: bool = False) -> Expr | None:
    """Unsigned plain decimals ``I[.F]`` with value x, max(lo, 0) <(=) x <(=) hi; None when empty."""
    if lo is None or lo < 0:
        lo, lo_inclusive = Fraction(0), True
    if hi is not None and (hi < lo or (hi == lo and not (lo_inclusive and hi_inclusive))):
        return None

    def fraction(low: str, low_inclusive: bool, high: str | None, high_inclusive: bool) -> Expr:
        # A non-integer's fraction is above zero: a zero lower bound becomes exclusive.
        low_inclusive = low_inclusive and not (non_integer and not low.strip("0"))
        return _fraction(low, low_inclusive, high, high_inclusive, budget)

    lo_int = lo.numerator // lo.denominator
    lo_text = _fraction_text(lo - lo_int)
    free = fraction("", True, None, True)
    if hi is None:
        return choice(seq(natural_range(lo_int, lo_int), fraction(lo_text, lo_inclusive, None, True)),
                      seq(natural_range(lo_int + 1, None), free))
    hi_int = hi.numerator // hi.denominator
    hi_text = _fraction_text(hi - hi_int)
    if lo_int == hi_int:
        return seq(natural_range(lo_int, lo_int), fraction(lo_text, lo_inclusive, hi_text, hi_inclusive))
    parts = [seq(natural_range(lo_int, lo_int), fraction(lo_text, lo_inclusive, None, True))]
    if hi_int - lo_int >= 2:
        parts.append(seq(natural_range(lo_int + 1, hi_int - 1), free))
    parts.append(seq(natural_range(hi_int, hi_int), fraction("", True, hi_text, hi_inclusive)))
    return choice(*parts)


def _fraction_text(value: Fraction) -> str:
    """The digits after the point of a value in [0, 1), without trailing zeros.

    Bounds come from JSON numbers, so their expansion is finite.
    """
    if value == 0:
        return ""
    text = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
    return text.split(".")[1].rstrip("0")


def _free_fraction(budget: int | None) -> Expr:
    """An optional ``.F``; with a budget, at most that many significant digits (zeros may follow)."""
    if budget is None:
        return choice(EMPTY, seq(literal("."), DIGITS))
    return choice(EMPTY, seq(literal("."), _digits_within(budget, 1)))


def _digits_within(budget: int, least: int) -> Expr:
    """Digit strings of length >= least whose digits past ``budget`` are zeros."""
    zeros_after = Repeat(literal("0"), max(least - budget, 0), None)
    return seq(Repeat(DIGIT, min(least, budget), budget), zeros_after)


def _fraction(lo: str, lo_inclusive: bool, hi: str | None, hi_inclusive: bool, budget: int | None) -> Expr:
    """The optional ``.F`` whose value 0.F satisfies 0.lo <(=) 0.F <(=) 0.hi (``hi=None``: no bound)."""
    digits = _digits_between(lo, lo_inclusive, hi, hi_inclusive, budget)
    dotted = seq(literal("."), digits)
    return choice(EMPTY, dotted) if _zero_ok(lo, lo_inclusive, hi, hi_inclusive) else dotted


def _zero_ok(lo: str, lo_inclusive: bool, hi: str | None, hi_inclusive: bool) -> bool:
    """Whether a remaining value of exactly zero satisfies the remaining bounds."""
    if lo.strip("0"):
        return False
    if not lo_inclusive:
        return False
    return hi is None or bool(hi.strip("0")) or hi_inclusive


def _digits_between(lo: str, lo_inclusive: bool, hi: str | None, hi_inclusive: bool, budget: int | None) -> Expr:
    """Non-empty digit strings D with 0.lo <(=) 0.D <(=) 0.hi (strings compared padded with zeros).

    ``hi=None`` leaves the top open (below 1). ``budget`` digits may be significant; the rest are zeros.
    """
    if budget == 0:
        return Repeat(literal("0"), 1, None) if _zero_ok(lo, lo_inclusive, hi, hi_inclusive) else NOTHING
    if not lo.strip("0") and hi is None:
        if lo_inclusive:
            return DIGITS if budget is None else _digits_within(budget, 1)
        # Strictly above zero: some non-zero digit.
        if budget is None:
            return seq(Repeat(literal("0"), 0, None), NONZERO, Repeat(DIGIT, 0, None))
        return choice(*(seq(Repeat(literal("0"), i, i), NONZERO, _digits_within(budget - i - 1, 0))
                        for i in range(budget)))
    if hi is not None and not hi.strip("0"):
        return Repeat(literal("0"), 1, None) if _zero_ok(lo, lo_inclusive, hi, hi_inclusive) else NOTHING
    lo_digit = int(lo[0]) if lo else 0
    hi_digit = int(hi[0]) if hi else 9
    rest_budget = None if budget is None else budget - 1
    alternatives: list[Expr] = []
    for d in sorted({lo_digit, hi_digit}):
        on_lo, on_hi = d == lo_digit, hi is not None and d == hi_digit
        if not (on_lo or on_hi):
            continue
        next_lo, next_lo_inclusive = (lo[1:], lo_inclusive) if on_lo else ("", True)
        next_hi, next_hi_inclusive = (hi[1:], hi_inclusive) if on_hi and hi is not None else (None, True)
        rest = _digits_between(next_lo, next_lo_inclusive, next_hi, next_hi_inclusive, rest_budget)
        if _zero_ok(next_lo, next_lo_inclusive, next_hi, next_hi_inclusive):
            rest = choice(EMPTY, rest)
        alternatives.append(seq(digit_class(d, d), rest))
    top = hi_digit if hi is not None else 10
    if top - lo_digit >= 2:
        free = Repeat(DIGIT, 0, None) if rest_budget is None else _digits_within(rest_budget, 0)
        alternatives.append(seq(digit_class(lo_digit + 1, top - 1), free))
    return choice(*alternatives)


def divisible_rules(prefix: str, modulus: int) -> tuple[Expr, dict[str, Expr]]:
    """Natural numbers (no leading zeros) divisible by ``modulus``: an expression plus helper rules.

    Rule ``{prefix}{r}`` matches the digit strings that take remainder ``r`` to 0.
    """
    rules: dict[str, Expr] = {}
    for r in range(modulus):
        alternatives = [EMPTY] if r == 0 else []
        for d in range(10):
            alternatives.append(seq(digit_class(d, d), RuleRef(f"{prefix}{(r * 10 + d) % modulus}")))
        rules[f"{prefix}{r}"] = choice(*alternatives)
    starts = [literal("0")] + [seq(digit_class(d, d), RuleRef(f"{prefix}{d % modulus}")) for d in range(1, 10)]
    return choice(*starts), rules


def multiples_in_range(lo: int, hi: int, step: int) -> Expr:
    """The multiples of ``step`` in [lo, hi] (a short list), spelled as JSON integers."""
    first = -(-lo // step) * step
    values = range(first, hi + 1, step)
    return choice(*(literal(str(v)) for v in values), *([literal("-0")] if 0 in values else []))


MAX_WRITTEN_RUN = 15
"""Generation writes at most this many digits (or zeros) in a row where a number's grammar would
allow any number of them: 16 significant digits is all a double holds, and a model that starts
``10000000…`` must meet the end of its number."""


def bounded_for_writing(expr: Expr) -> Expr:
    """``expr`` with every unbounded repetition capped at `MAX_WRITTEN_RUN` more than its minimum:
    a subset of the numbers (every written one is valid) in which no number runs forever."""
    if isinstance(expr, Repeat):
        item = bounded_for_writing(expr.item)
        most = expr.max if expr.max is not None else expr.min + MAX_WRITTEN_RUN
        return Repeat(item, expr.min, most)
    if isinstance(expr, Sequence):
        return Sequence(tuple(bounded_for_writing(item) for item in expr.items))
    if isinstance(expr, Choice):
        return Choice(tuple(bounded_for_writing(item) for item in expr.alternatives))
    return expr
