"""Token masks in lexer mode: the adaptive cache keyed by lexer state.

For a lexer state (the live terminal automata of the current lexeme) every token falls in one of
three classes, whatever the parser below:

- *accepted*: the lexeme survives the whole token (it can still become some candidate terminal,
  and every candidate is acceptable to the parser by construction);
- *uncertain*: the lexeme dies inside the token after last matching terminal ``T`` at offset
  ``k >= 1``; longest match then ends the lexeme there, and the residual ``token[k:]`` must be
  checked from the parser state after ``T`` (a vectorised walk at run time). Tokens are grouped
  by the lexer's *end class* at offset ``k``: the terminal, plus for a Python newline the
  indentation it measured (which decides INDENT/DEDENT);
- *fail*: the lexeme dies without matching again inside the token, so the whole token belongs to
  the fallback configuration (the lexeme ended before the token, or an older fallback): its
  verdict is that state's own mask, cached like any other.

Positions are computed lazily, the first time a lexer state is seen, and kept for the process.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from codemask.engine.lexer import LexerCore, LexParserCore
from codemask.engine.mask_cache import Uncertain, pack_ids, resolve_residuals, set_bits, uncertain_entry
from codemask.engine.parser import DEAD
from codemask.engine.token_trie import ByteVocabulary, TokenTrie, expand_ranges, token_trie


@dataclass
class LexerPosition:
    """The classification of the vocabulary at one lexer state."""

    accepted: np.ndarray  # uint32 [words]
    fail: np.ndarray  # uint32 [words]
    uncertain: dict[int, Uncertain]  # by the end class (`LexerCore.end_class_of`) that ends the lexeme


def classify_lexer_state(lexer: LexerCore, trie: TokenTrie, lid: int, vocab_size: int,
                         token_bytes: list[bytes]) -> LexerPosition:
    """Walk the trie through the lexer automata from ``lid`` (see module docstring)."""
    n = trie.num_tokens
    accepted = np.zeros(n, dtype=bool)
    exit_depth = np.full(n, -1, dtype=np.int64)
    exit_winner = np.full(n, -1, dtype=np.int64)
    blocked = np.zeros(n, dtype=bool)
    winner0 = int(lexer.end_class_of[lid])
    idx = np.arange(len(trie.levels[0].byte), dtype=np.int64) if trie.levels else np.zeros(0, dtype=np.int64)
    parents = np.full(len(idx), lid, dtype=np.int64)
    acc_depth = np.full(len(idx), 0 if winner0 >= 0 else -1, dtype=np.int64)
    acc_winner = np.full(len(idx), winner0, dtype=np.int64)
    for depth, level in enumerate(trie.levels, start=1):
        if not len(idx):
            break
        states = lexer.advance(parents, level.byte[idx]).astype(np.int64)
        poisoned = np.zeros(len(states), dtype=bool)
        poisoned[states >= 0] = lexer.poisoned[states[states >= 0]]
        if poisoned.any():  # refused outright, with every longer token below (no fallback)
            blocked[expand_ranges(level.lo[idx[poisoned]], level.hi[idx[poisoned]])] = True
            keep = ~poisoned
            idx, states, acc_depth, acc_winner = idx[keep], states[keep], acc_depth[keep], acc_winner[keep]
        dead = states < 0
        if dead.any():
            toks = expand_ranges(level.lo[idx[dead]], level.hi[idx[dead]])
            counts = level.hi[idx[dead]] - level.lo[idx[dead]]
            exit_depth[toks] = np.repeat(acc_depth[dead], counts)
            exit_winner[toks] = np.repeat(acc_winner[dead], counts)
        live = ~dead
        idx, states, acc_depth, acc_winner = idx[live], states[live], acc_depth[live], acc_winner[live]
        tok = level.token[idx]
        accepted[tok[tok >= 0]] = True
        winners = lexer.end_class_of[states].astype(np.int64)
        matched = winners >= 0
        acc_depth = np.where(matched, depth, acc_depth)
        acc_winner = np.where(matched, winners, acc_winner)
        if depth == len(trie.levels):
            break
        lo, hi = level.child_lo[idx], level.child_hi[idx]
        counts = hi - lo
        parents = np.repeat(states, counts)
        acc_depth = np.repeat(acc_depth, counts)
        acc_winner = np.repeat(acc_winner, counts)
        idx = expand_ranges(lo, hi)
    fail = ~accepted & ~blocked & (exit_depth <= 0)
    uncertain: dict[int, Uncertain] = {}
    unc_rows = np.flatnonzero(~accepted & ~blocked & (exit_depth >= 1))
    for terminal in np.unique(exit_winner[unc_rows]).tolist():
        rows = unc_rows[exit_winner[unc_rows] == terminal]
        entry = uncertain_entry(trie, rows, exit_depth[rows])
        if entry is not None:
            uncertain[int(terminal)] = entry
    return LexerPosition(
        accepted=pack_ids(trie.token_ids(np.flatnonzero(accepted)), vocab_size),
        fail=pack_ids(trie.token_ids(np.flatnonzero(fail)), vocab_size),
        uncertain=uncertain,
    )


class LexerMaskComputer:
    """Run-time masks of combined lexer/parser states, memoised per state."""

    def __init__(self, core: LexParserCore, vocab: ByteVocabulary, capacity: int = 4096) -> None:
        self.core = core
        self.vocab = vocab
        self.vocab_size = vocab.vocab_size
        self.stop_words = pack_ids(np.array(sorted(vocab.stop_token_ids), dtype=np.int64), vocab.vocab_size)
        self._positions: dict[int, LexerPosition] = {}
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._capacity = capacity
        self._trie: TokenTrie | None = None

    @property
    def trie(self) -> TokenTrie:
        """The vocabulary's trie, built (or taken from the process cache) when first needed."""
        if self._trie is None:
            self._trie = token_trie(self.vocab)
        return self._trie

    def position(self, lid: int) -> LexerPosition:
        found = self._positions.get(lid)
        if found is None:
            found = classify_lexer_state(self.core.lexer, self.trie, lid, self.vocab_size, self.vocab.token_bytes)
            self._positions[lid] = found
        return found

    def mask(self, state: int) -> np.ndarray:
        """The uint32 bitmask row of a combined state (shared: do not modify it)."""
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
        core = self.core
        pid, lid = core.configs(state)[0]
        pos = self.position(lid)
        words = pos.accepted.copy()
        for end_class, unc in pos.uncertain.items():
            resumed = core.resumed_state(pid, end_class)
            if resumed != DEAD:
                set_bits(words, resolve_residuals(core, unc, resumed, self.trie.matrix))
        fallback = core.fallback_state(state)
        if fallback != DEAD:
            words |= pos.fail & self.mask(fallback)
        if core.can_end(state):
            words |= self.stop_words
        return words
