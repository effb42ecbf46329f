"""The adaptive token-mask cache (XGrammar's context-independent / context-dependent split).

For every RTN state a parser stack can wait on (a *position*), the whole vocabulary is walked
through the position's rule frame in isolation (bottom = ``FRAME``), the first time a parser
state needs that position (`LazyPositionMasks`, the default) or for all positions at compile
time (`build_position_masks`, ``precompute=True``):

- a token that the frame can consume entirely (or that ends exactly where the frame's rule may
  end) is *accepted* whatever lies below on the stack;
- a token that can only be consumed by leaving the frame after ``k`` bytes is *uncertain*: its
  residual bytes ``token[k:]`` must be checked against the real caller at run time;
- every other token is rejected whatever lies below.

At run time the mask of a parser state is the OR of its positions' accepted sets plus the
uncertain tokens whose residuals the actual callers accept. Residuals are walked with the same
vectorised transition table as everything else, and finished masks are cached per parser state,
so a state seen before costs a lookup.

This module holds the cache of positions; the classification itself is `position_classifier`
(over the trie walks of `trie_walk`, shared between grammars by `shared_positions`), the uncertain
tokens' records `uncertain`, and the run-time masks `mask_computer`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from codemask.engine.parser import ParserCore
from codemask.engine.position_classifier import PositionClassifier
from codemask.engine.token_trie import TokenTrie
from codemask.engine.uncertain import Uncertain


@dataclass
class PositionMasks:
    """The cache of every position: per position, the accepted set and the uncertain tokens."""

    row_of_state: np.ndarray  # int32 [num RTN states]: row below, or -1 if not a position
    accepted: np.ndarray  # uint32 [positions, words]
    uncertain: list[Uncertain | None]

    @property
    def num_uncertain(self) -> int:
        return sum(len(u.token_ids) for u in self.uncertain if u is not None)

    def rows(self, positions: list[int]) -> list[int]:
        """The rows of ``positions`` (all classified already)."""
        return self.row_of_state[positions].tolist()

    def accepted_row(self, row: int) -> np.ndarray:
        return self.accepted[row]

    def uncertain_of(self, row: int) -> Uncertain | None:
        return self.uncertain[row]


def build_position_masks(core: ParserCore, trie: TokenTrie, vocab_size: int,
                         progress: str | None = None) -> PositionMasks:
    """Classify the vocabulary at every position of the grammar at once (``precompute=True``)."""
    positions = np.flatnonzero(core.rtn.scanning)
    row_of_state = np.full(core.rtn.num_states, -1, dtype=np.int32)
    row_of_state[positions] = np.arange(len(positions), dtype=np.int32)
    accepted, uncertain = PositionClassifier(core, trie, vocab_size).classify(positions, progress)
    return PositionMasks(row_of_state=row_of_state, accepted=accepted, uncertain=uncertain)


class LazyPositionMasks:
    """Position masks classified the first time a parser state needs them (the default).

    Compiling then costs only the automata, and a schema compiled per request never pays for the
    positions its output does not visit; the new positions of one parser state are classified
    together, and later ones reuse the subtree walks of earlier ones.
    """

    def __init__(self, core: ParserCore, trie: TokenTrie, vocab_size: int) -> None:
        self._classifier = PositionClassifier(core, trie, vocab_size)
        self._classifier.prepare()
        # per RTN state, its row or -1: a list, read a few items at a time right after a walk of the
        # vocabulary has taken the processor's caches (numpy's indexing took 0.1 ms there)
        self._row_of_state = [-1] * core.rtn.num_states
        self._accepted: list[np.ndarray] = []
        self._uncertain: list[Uncertain | None] = []
        self._lock = threading.Lock()

    @property
    def core(self) -> ParserCore:
        """The parser core its positions are walked over (frame states only)."""
        return self._classifier.core

    @property
    def num_classified(self) -> int:
        return len(self._accepted)

    def rows(self, positions: list[int]) -> list[int]:
        """The rows of ``positions``, classifying those not seen before in one batch."""
        row_of_state = self._row_of_state
        rows = [row_of_state[p] for p in positions]
        if -1 in rows:
            with self._lock:
                self._classify_missing(positions)
            rows = [row_of_state[p] for p in positions]
        return rows

    def _classify_missing(self, positions: list[int]) -> None:
        missing = sorted({p for p in positions if self._row_of_state[p] < 0})
        if not missing:
            return  # another thread classified them while this one waited
        accepted, uncertain = self._classifier.classify(np.array(missing, dtype=np.int64))
        base = len(self._accepted)
        self._accepted.extend(accepted)
        self._uncertain.extend(uncertain)
        for row, position in enumerate(missing, start=base):
            self._row_of_state[position] = row

    def accepted_row(self, row: int) -> np.ndarray:
        return self._accepted[row]

    def uncertain_of(self, row: int) -> Uncertain | None:
        return self._uncertain[row]
