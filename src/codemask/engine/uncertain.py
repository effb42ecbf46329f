"""A position's uncertain tokens, the residual bytes each must continue with, and resolving
them against a caller's state at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from codemask.engine.token_trie import TokenTrie


@dataclass
class Uncertain:
    """A position's uncertain tokens and the residual bytes each must continue with.

    A distinct residual is kept as where it lies in the trie's byte matrix (the tail of one
    token), not as a copy: a position where most of the vocabulary leaves the frame (the inside
    of a counting rule, say) has tens of thousands of distinct residuals.
    """

    token_ids: np.ndarray  # int32 [U]
    residual_of: np.ndarray  # int32 [U]: index into the residual table below
    residual_rows: np.ndarray  # int32 [R]: the trie row (sorted token) the residual is a tail of
    residual_starts: np.ndarray  # int32 [R]: the byte where it starts in that token
    residual_len: np.ndarray  # int32 [R]
    # Too many tokens leave the frame to list them (`MAX_LISTED_UNCERTAIN`; the arrays are then
    # empty): a mask reads them from a scan of the trie from the parser's own state instead.
    direct: bool = False

    @classmethod
    def unlisted(cls) -> Uncertain:
        """The uncertain tokens of a position with too many to list (`direct`)."""
        empty = np.zeros(0, dtype=np.int32)
        return cls(empty, empty, empty, empty, empty, direct=True)

    def restricted(self, keep_residual: np.ndarray) -> Uncertain | None:
        """The tokens whose residual ``keep_residual`` (bool [R]) marks, residuals renumbered."""
        if self.direct or keep_residual.all():
            return self
        if not keep_residual.any():
            return None
        renumber = np.cumsum(keep_residual, dtype=np.int32) - 1
        tokens = keep_residual[self.residual_of]
        return Uncertain(token_ids=self.token_ids[tokens], residual_of=renumber[self.residual_of[tokens]],
                         residual_rows=self.residual_rows[keep_residual],
                         residual_starts=self.residual_starts[keep_residual],
                         residual_len=self.residual_len[keep_residual])

    def restricted_to_tokens(self, keep_token: np.ndarray) -> Uncertain | None:
        """The tokens ``keep_token`` (bool [U]) marks, the residuals none of them has dropped."""
        if self.direct or keep_token.all():
            return self
        if not keep_token.any():
            return None
        used = np.zeros(len(self.residual_rows), dtype=bool)
        used[self.residual_of[keep_token]] = True
        renumber = np.cumsum(used, dtype=np.int32) - 1
        return Uncertain(token_ids=self.token_ids[keep_token], residual_of=renumber[self.residual_of[keep_token]],
                         residual_rows=self.residual_rows[used], residual_starts=self.residual_starts[used],
                         residual_len=self.residual_len[used])


def uncertain_entries(trie: TokenTrie, owner: np.ndarray, sorted_idx: np.ndarray, offsets: np.ndarray,
                      count: int) -> list[Uncertain | None]:
    """The `Uncertain` record of each of ``count`` owners (``owner`` ascending) whose tokens
    (sorted rows ``sorted_idx``) leave a frame after ``offsets`` bytes, None for an owner without.

    Residuals ``token[k:]`` are deduplicated per owner (most share a tail such as ``,`` or
    ``):\n``) by the trie's exact suffix numbers, all owners at once: per position, a dozen array
    operations would cost more than the work. A group's representative is its first member.
    """
    out: list[Uncertain | None] = [None] * count
    if not len(sorted_idx):
        return out
    lengths = trie.lengths[sorted_idx].astype(np.int64) - offsets
    numbers = trie.suffix_numbers(sorted_idx, offsets)
    order = np.lexsort((numbers, owner))  # stable: a group's first member is its first occurrence
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (owner[order][1:] != owner[order][:-1]) | (numbers[order][1:] != numbers[order][:-1])
    group_of = np.empty(len(order), dtype=np.int64)
    group_of[order] = np.cumsum(new_group) - 1
    rep = order[new_group]  # per group, its first member
    bounds = np.searchsorted(owner, np.arange(count + 1))
    group_bounds = np.searchsorted(owner[rep], np.arange(count + 1))
    for i in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():
        a, b = int(bounds[i]), int(bounds[i + 1])
        g = int(group_bounds[i])
        first = rep[g:int(group_bounds[i + 1])]
        token_ids, residual_of = trie.expand_pairs(sorted_idx[a:b], group_of[a:b] - g)
        out[i] = Uncertain(token_ids=token_ids.astype(np.int32), residual_of=residual_of.astype(np.int32),
                           residual_rows=sorted_idx[first].astype(np.int32),
                           residual_starts=offsets[first].astype(np.int32),
                           residual_len=lengths[first].astype(np.int32))
    return out


class Walker(Protocol):
    """Anything with memoised, vectorised byte transitions over interned states."""

    def advance(self, states: np.ndarray, symbols: np.ndarray) -> np.ndarray: ...


def resolve_residuals(core: Walker, unc: Uncertain, start_state: int, matrix: np.ndarray) -> np.ndarray:
    """The uncertain tokens whose residual bytes (read from the trie's byte ``matrix``) are
    accepted from ``start_state``."""
    states = np.full(len(unc.residual_len), start_state, dtype=np.int64)
    for col in range(int(unc.residual_len.max())):
        active = np.flatnonzero((unc.residual_len > col) & (states >= 0))
        if not len(active):
            break
        symbols = matrix[unc.residual_rows[active], unc.residual_starts[active] + col]
        states[active] = core.advance(states[active], symbols)
    return unc.token_ids[(states >= 0)[unc.residual_of]]
