"""Back-to-back repeats at the end of a growing sequence, updated in O(max_period) per symbol.

RPG asks one question at every decoding step, of two sequences (the generated tokens, and the
grammar units of the code): does the sequence end with the same span several times in a row, and
if so, how many times, and which symbol would begin the next copy? Rescanning every span length at
every step, as RPG's released code does, costs O(n²) per step.

The structure here answers it incrementally. For every period ``p`` up to ``max_period`` it keeps
``run[p]``: how many trailing positions ``i`` satisfy ``s[i] == s[i - p]``. The suffix of length
``run[p] + p`` then has period ``p``, so ``(run[p] + p) // p`` whole copies of the last ``p``
symbols end the sequence back to back, and the symbol that continues the loop is ``s[n - p]``.
Appending a symbol updates every ``run[p]`` at once with one vectorised comparison against the
last ``max_period`` symbols (``run[p] + 1`` where they match, 0 where not) — the incremental
counterpart of the suffix-array/LCP query "longest common extension of the reversed sequence with
itself shifted by ``p``". Each step keeps its ``run`` array, so taking symbols back (speculative
decoding, beam forks) is a pop, not a recomputation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Repeat:
    """The sequence ends with ``copies`` (>= 2) back-to-back copies of its last ``period`` symbols;
    ``repeated`` symbols in all (at least ``period``) equal the symbol ``period`` before them."""

    period: int
    copies: int
    repeated: int

    @property
    def count(self) -> int:
        """How many times the span was repeated after its first occurrence (the exponent of the decay)."""
        return self.copies - 1


class TandemRepeats:
    """The repeat that ends a growing integer sequence, for periods up to ``max_period``."""

    def __init__(self, max_period: int = 256) -> None:
        if max_period < 1:
            raise ValueError(f"max_period must be >= 1, got {max_period}")
        self.max_period = max_period
        self._periods = np.arange(1, max_period + 1, dtype=np.int64)
        self._symbols = np.zeros(64, dtype=np.int64)
        self._length = 0
        self._runs: list[np.ndarray] = []  # per position, run[p - 1] after that symbol

    def __len__(self) -> int:
        return self._length

    @property
    def symbols(self) -> np.ndarray:
        """The sequence so far (a read-only view)."""
        view = self._symbols[: self._length]
        view.flags.writeable = False
        return view

    def push(self, symbol: int) -> None:
        """Append one symbol: one comparison against the last ``max_period`` symbols."""
        n = self._length
        if n == len(self._symbols):
            self._symbols = np.concatenate([self._symbols, np.zeros_like(self._symbols)])
        width = min(n, self.max_period)
        runs = np.zeros(self.max_period, dtype=np.int32)
        if width:
            previous = self._runs[-1][:width]
            earlier = self._symbols[n - width: n][::-1]  # s[n - p] for p = 1 .. width
            runs[:width] = np.where(earlier == symbol, previous + 1, 0)
        self._symbols[n] = symbol
        self._length = n + 1
        self._runs.append(runs)

    def extend(self, symbols: Iterable[int]) -> None:
        for symbol in symbols:
            self.push(int(symbol))

    def pop(self, count: int = 1) -> None:
        """Take back the last ``count`` symbols."""
        if not 0 <= count <= self._length:
            raise ValueError(f"cannot pop {count} of {self._length} symbols")
        self._length -= count
        del self._runs[self._length:]

    def repeat(self) -> Repeat | None:
        """The repeat with the most copies that ends the sequence (the shortest period on ties), or None."""
        if not self._runs:
            return None
        runs = self._runs[-1]
        candidates = np.flatnonzero(runs >= self._periods)  # periods with at least two copies
        if not len(candidates):
            return None
        periods = self._periods[candidates]
        copies = (runs[candidates] + periods) // periods
        best = int(np.argmax(copies))  # first maximum: the shortest period
        return Repeat(period=int(periods[best]), copies=int(copies[best]), repeated=int(runs[candidates[best]]))

    def occurrences(self, period: int, since: int = 0) -> int:
        """How many times the last ``period`` symbols occur in the sequence from position ``since`` on,
        anywhere (overlaps included), the last copy too.

        Candidates are the positions holding the span's first symbol, narrowed one symbol at a time:
        a handful of array operations on a shrinking index, not a window per position.
        """
        n = self._length
        if not 0 < period <= n - since:
            return 0
        symbols = self._symbols[:n]
        span = symbols[n - period:]
        at = np.flatnonzero(symbols[since: n - period + 1] == span[0]) + since
        for k in range(1, period):
            if not len(at):
                break
            at = at[symbols[at + k] == span[k]]
        return len(at)

    def next_symbol(self, repeat: Repeat) -> int:
        """The symbol that would continue the loop: the first of the last copy."""
        return int(self._symbols[self._length - repeat.period])

    def fork(self) -> TandemRepeats:
        """An independent copy (run arrays are never written after they are stored, so they are shared)."""
        other = TandemRepeats.__new__(TandemRepeats)
        other.max_period = self.max_period
        other._periods = self._periods
        other._symbols = self._symbols.copy()
        other._length = self._length
        other._runs = list(self._runs)
        return other
