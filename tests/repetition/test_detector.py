"""TandemRepeats against a brute-force oracle: the repeat that ends a sequence, at every prefix, with rollbacks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemask.repetition.detector import Repeat, TandemRepeats


def brute_force(seq: list[int], max_period: int) -> Repeat | None:
    """Whole copies of the last ``p`` symbols, counted block by block from the end; most copies, then
    shortest; and how far the period extends, symbol by symbol."""
    best: Repeat | None = None
    n = len(seq)
    for p in range(1, min(max_period, n) + 1):
        copies = 1
        while (copies + 1) * p <= n and seq[n - (copies + 1) * p: n - copies * p] == seq[n - p:]:
            copies += 1
        if copies >= 2 and (best is None or copies > best.copies):
            repeated = 0  # trailing symbols equal to the one p before them
            while repeated + p < n and seq[n - 1 - repeated] == seq[n - 1 - repeated - p]:
                repeated += 1
            best = Repeat(p, copies, repeated)
    return best


sequences = st.lists(st.integers(0, 2), max_size=60)


@settings(max_examples=120, deadline=None)
@given(sequences, st.integers(1, 12))
def test_every_prefix_matches_the_oracle(seq: list[int], max_period: int) -> None:
    detector = TandemRepeats(max_period)
    for i, symbol in enumerate(seq):
        detector.push(symbol)
        expected = brute_force(seq[: i + 1], max_period)
        assert detector.repeat() == expected, (seq[: i + 1], max_period)
        if expected is not None:  # the symbol that continues the loop is the first of the last copy
            assert detector.next_symbol(expected) == seq[i + 1 - expected.period]


@settings(max_examples=80, deadline=None)
@given(sequences, sequences, st.data())
def test_pop_and_fork_equal_a_fresh_detector(first: list[int], second: list[int], data: st.DataObject) -> None:
    detector = TandemRepeats(8)
    detector.extend(first + second)
    fork = detector.fork()
    detector.pop(len(second))
    fresh = TandemRepeats(8)
    fresh.extend(first)
    assert detector.repeat() == fresh.repeat() and list(detector.symbols) == first
    tail = data.draw(sequences)
    detector.extend(tail)
    fresh.extend(tail)
    assert detector.repeat() == fresh.repeat() == brute_force(first + tail, 8)
    assert fork.repeat() == brute_force(first + second, 8)  # the fork did not see the pops


def test_examples_and_errors() -> None:
    detector = TandemRepeats(4)
    detector.extend([7, 1, 2, 3, 1, 2, 3, 1, 2, 3])
    assert detector.repeat() == Repeat(period=3, copies=3, repeated=6) and detector.repeat().count == 2  # type: ignore[union-attr]
    assert detector.next_symbol(Repeat(3, 3, 6)) == 1
    detector.push(9)
    assert detector.repeat() is None
    long_period = TandemRepeats(4)
    long_period.extend([1, 2, 3, 4, 5] * 2)  # period 5 is beyond max_period
    assert long_period.repeat() is None
    with pytest.raises(ValueError):
        long_period.pop(11)
    with pytest.raises(ValueError):
        TandemRepeats(0)


@settings(max_examples=120, deadline=None)
@given(sequences, st.integers(1, 6), st.integers(0, 10))
def test_occurrences_count_every_window_equal_to_the_last_span(seq: list[int], period: int, since: int) -> None:
    detector = TandemRepeats(8)
    detector.extend(seq)
    n = len(seq)
    expected = 0 if not 0 < period <= n - since else sum(
        seq[i: i + period] == seq[n - period:] for i in range(since, n - period + 1))
    assert detector.occurrences(period, since) == expected
