"""Number grammars against exact arithmetic: every spelling in range accepted, every other refused."""

from __future__ import annotations

import random
from decimal import Decimal
from fractions import Fraction

import pytest

from codemask.engine.recognizer import Recognizer
from codemask.grammar.grammar import Grammar
from codemask.grammar.ir import NOTHING, Expr, GrammarIR, Rule
from codemask.grammar.json_schema.numbers import integer_range, number_range

RANDOM = random.Random(7)
SPELLINGS = sorted({f"{RANDOM.uniform(-150, 150):.{RANDOM.choice([0, 1, 2, 3])}f}" for _ in range(250)}
                   | {str(RANDOM.randint(-300, 300)) for _ in range(150)}
                   | {"0", "-0", "0.0", "-0.0", "0.10", "10.50", "5", "5.0", "5.000001", "4.99999", "100", "-100"})
EXPONENTS = ["1e2", "-1e2", "1.5E-3", "-2.5e+1", "0e0"]


def accepts(expr: Expr, text: str) -> bool:
    if expr == NOTHING:
        return False
    return Recognizer(Grammar(GrammarIR({"root": Rule("root", expr)}, "root"), "test")).accepts(text)


def recognizer(expr: Expr) -> Recognizer | None:
    return None if expr == NOTHING else Recognizer(Grammar(GrammarIR({"root": Rule("root", expr)}, "root"), "test"))


def random_bound() -> Fraction | None:
    if RANDOM.random() < 0.2:
        return None
    return Fraction(Decimal(f"{RANDOM.uniform(-120, 120):.{RANDOM.choice([0, 1, 2])}f}"))


def in_range(x: Fraction, lo: Fraction | None, lo_inc: bool, hi: Fraction | None, hi_inc: bool) -> bool:
    return (lo is None or (x >= lo if lo_inc else x > lo)) and (hi is None or (x <= hi if hi_inc else x < hi))


@pytest.mark.parametrize("trial", range(25))
def test_integer_ranges_are_exact(trial: int) -> None:
    lo = None if RANDOM.random() < 0.2 else RANDOM.randint(-500, 500)
    hi = None if RANDOM.random() < 0.2 else RANDOM.randint(-500, 500)
    checker = recognizer(integer_range(lo, hi))
    for value in [*range(-650, 650, 3), 10**6, -(10**6)]:
        expected = (lo is None or value >= lo) and (hi is None or value <= hi)
        assert (checker is not None and checker.accepts(str(value))) == expected, (lo, hi, value)


@pytest.mark.parametrize("trial", range(25))
@pytest.mark.parametrize("non_integer", [False, True])
def test_decimal_ranges_are_exact(trial: int, non_integer: bool) -> None:
    lo, hi = random_bound(), random_bound()
    lo_inc, hi_inc = RANDOM.random() < 0.5, RANDOM.random() < 0.5
    digits = None if non_integer else RANDOM.choice([None, None, 0, 1, 2])
    checker = recognizer(number_range(lo, lo_inc, hi, hi_inc, digits, non_integer=non_integer))
    for text in SPELLINGS:
        x = Fraction(Decimal(text))
        expected = in_range(x, lo, lo_inc, hi, hi_inc)
        if digits is not None:
            expected = expected and (x * 10**digits).denominator == 1
        if non_integer:
            expected = expected and x.denominator != 1
        assert (checker is not None and checker.accepts(text)) == expected, (lo, lo_inc, hi, hi_inc, digits, text)
    for text in EXPONENTS:  # accepted only where the side of zero is unbounded, and always in range
        if checker is not None and checker.accepts(text):
            assert in_range(Fraction(Decimal(text)), lo, lo_inc, hi, hi_inc), text


def test_exponents_are_accepted_where_the_range_is_open() -> None:
    open_range = number_range(None, True, None, True)
    assert all(accepts(open_range, t) for t in EXPONENTS)
    assert accepts(number_range(Fraction(0), True, None, True), "1.5e-05")
    assert not accepts(number_range(Fraction(1), True, None, True), "1e-05")
