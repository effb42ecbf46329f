"""Run-time token masks of parser states: the positions' accepted sets plus the uncertain
tokens whose residuals the actual callers accept, memoised per state.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import numpy as np

from codemask.engine import native
from codemask.engine.bitmask import bitmask_width, set_bits, stop_row
from codemask.engine.parser import DEAD, ParserCore
from codemask.engine.position_masks import LazyPositionMasks, PositionMasks
from codemask.engine.token_trie import TokenTrie
from codemask.engine.uncertain import resolve_residuals


class MaskComputer:
    """Run-time masks of parser states, from the position cache plus residual walks, memoised."""

    def __init__(self, core: ParserCore, masks: PositionMasks | LazyPositionMasks, trie: TokenTrie, vocab_size: int,
                 stop_token_ids: frozenset[int], capacity: int = 4096) -> None:
        if core.lazy:
            raise ValueError("byte-level position masks need an expanded parser core, not ParserCore(lazy=True) "
                             "(a lazy core's nodes stand in call states, which have no position mask)")
        self.core = core
        self.masks = masks
        self.trie = trie
        self.vocab_size = vocab_size
        self.stop_words = stop_row(stop_token_ids, vocab_size)
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._capacity = capacity

    def mask(self, state: int) -> np.ndarray:
        """The uint32 bitmask row of a parser state (shared: do not modify it)."""
        words = self._cache.get(state)
        if words is not None:
            self._cache.move_to_end(state)
            return words
        words = self._compute(state)
        self._cache[state] = words
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
        return words

    def _compute(self, state: int) -> np.ndarray:
        core, masks = self.core, self.masks
        words = np.zeros(bitmask_width(self.vocab_size), dtype=np.uint32)
        stacks = core.state_stacks[state]
        rows = masks.rows([core.node_state[stack] for stack in stacks])
        for stack, row in zip(stacks, rows, strict=True):
            np.bitwise_or(words, masks.accepted_row(row), out=words)
            unc = masks.uncertain_of(row)
            if unc is not None and unc.direct:
                alone = core.closure([stack])  # (the parse of this stack alone: its mask, uncertain tokens included)
                if alone != DEAD:
                    np.bitwise_or(words, native.state_mask(self._walker, core, alone), out=words)
            elif unc is not None:
                exit_state = core.exit_state(stack)
                if exit_state == DEAD:
                    continue
                if native.enabled():
                    native.resolve_residuals(self._walker, core, exit_state, unc.residual_rows, unc.residual_starts,
                                             unc.residual_len, unc.token_ids, unc.residual_of, words)
                else:
                    set_bits(words, resolve_residuals(core, unc, exit_state, self.trie.matrix))
        if core.can_end(state):
            np.bitwise_or(words, self.stop_words, out=words)
        return words

    @functools.cached_property
    def _walker(self) -> native.PositionWalker:
        """The vocabulary's walker (`native.position_walker`), taken once: the extension is loaded."""
        return native.position_walker(self.trie, self.vocab_size)
