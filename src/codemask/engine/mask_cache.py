"""The adaptive token-mask cache (XGrammar's context-independent / context-dependent split).

At compile time, for every RTN state a parser stack can wait on (a *position*), the whole
vocabulary is walked through the position's rule frame in isolation (bottom = ``FRAME``):

- a token that the frame can consume entirely (or that ends exactly where the frame's rule may
  end) is *accepted* whatever lies below on the stack;
- a token that can only be consumed by leaving the frame after ``k`` bytes is *uncertain*: its
  residual bytes ``token[k:]`` must be checked against the real caller at run time;
- every other token is rejected whatever lies below.

At run time the mask of a parser state is the OR of its positions' accepted sets plus the
uncertain tokens whose residuals the actual callers accept. Residuals are walked with the same
vectorised transition table as everything else, and finished masks are cached per parser state,
so a state seen before costs a lookup.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from tqdm import tqdm

from codemask.engine.parser import DEAD, ParserCore
from codemask.engine.token_trie import TokenTrie, expand_ranges


def num_words(vocab_size: int) -> int:
    """int32 words in one bitmask row."""
    return (vocab_size + 31) // 32


def pack_ids(token_ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """A uint32 bitmask row with exactly ``token_ids`` set."""
    allowed = np.zeros(num_words(vocab_size) * 32, dtype=bool)
    allowed[token_ids] = True
    return np.packbits(allowed, bitorder="little").view(np.uint32)


def set_bits(words: np.ndarray, token_ids: np.ndarray) -> None:
    """Set the bits of ``token_ids`` in a uint32 bitmask row, in place."""
    if len(token_ids):
        ids = token_ids.astype(np.uint32)
        np.bitwise_or.at(words, ids >> 5, np.left_shift(np.uint32(1), ids & np.uint32(31)))


@dataclass
class Uncertain:
    """A position's uncertain tokens and the residual bytes each must continue with."""

    token_ids: np.ndarray  # int32 [U]
    residual_of: np.ndarray  # int32 [U]: index into the residual table below
    residuals: np.ndarray  # uint8 [R, L]: distinct residuals, zero-padded
    residual_len: np.ndarray  # int32 [R]


@dataclass
class PositionMasks:
    """The compile-time cache: per position, the accepted set and the uncertain tokens."""

    row_of_state: np.ndarray  # int32 [num RTN states]: row below, or -1 if not a position
    accepted: np.ndarray  # uint32 [positions, words]
    uncertain: list[Uncertain | None]

    @property
    def num_uncertain(self) -> int:
        return sum(len(u.token_ids) for u in self.uncertain if u is not None)


def build_position_masks(core: ParserCore, trie: TokenTrie, vocab_size: int,
                         token_bytes: list[bytes], progress: str | None = None) -> PositionMasks:
    """Classify the vocabulary at every position of the grammar (the compile-time work)."""
    positions = np.flatnonzero(core.rtn.scanning)
    row_of_state = np.full(core.rtn.num_states, -1, dtype=np.int32)
    row_of_state[positions] = np.arange(len(positions), dtype=np.int32)
    accepted = np.zeros((len(positions), num_words(vocab_size)), dtype=np.uint32)
    uncertain: list[Uncertain | None] = []
    with_callers = core.rtn.rules_with_callers()
    follow = core.rtn.follow_bytes()
    bar = tqdm(positions, desc=progress or "compiling grammar", unit="pos", delay=1.0, leave=False,
               disable=progress is None)
    for row, position in enumerate(bar):
        ok_sorted, unc_sorted, unc_k = classify_position(core, trie, int(position))
        accepted[row] = pack_ids(trie.token_ids(ok_sorted), vocab_size)
        rule = int(core.rtn.state_rule[position])
        if rule in with_callers:
            can_follow = follow[rule][trie.matrix[unc_sorted, unc_k]]
            uncertain.append(uncertain_entry(trie, token_bytes, unc_sorted[can_follow], unc_k[can_follow]))
        else:
            uncertain.append(None)  # leaving this frame ends the input: the residual is refused
    bar.close()
    return PositionMasks(row_of_state=row_of_state, accepted=accepted, uncertain=uncertain)


def classify_position(core: ParserCore, trie: TokenTrie, position: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Walk the trie from a frame-local state.

    Returns the sorted indices of the accepted tokens, and the (sorted index, exit offset) pairs
    of the uncertain ones.
    """
    start = core.frame_state(position)
    end_state = np.full(trie.num_tokens, DEAD, dtype=np.int64)
    exit_tokens: list[np.ndarray] = []
    exit_offsets: list[np.ndarray] = []
    if start == DEAD or not trie.levels:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    idx = np.arange(len(trie.levels[0].byte), dtype=np.int64)
    parents = np.full(len(idx), start, dtype=np.int64)
    for depth, level in enumerate(trie.levels, start=1):
        states = core.advance(parents, level.byte[idx]).astype(np.int64)
        live = states >= 0
        idx, states = idx[live], states[live]
        if not len(idx):
            break
        tok = level.token[idx]
        ends = tok >= 0
        end_state[tok[ends]] = states[ends]
        exiting = core.flags[states]
        if exiting.any():
            nodes = idx[exiting]
            longer = expand_ranges(level.lo[nodes] + (level.token[nodes] >= 0), level.hi[nodes])
            exit_tokens.append(longer)
            exit_offsets.append(np.full(len(longer), depth, dtype=np.int64))
        going = core.has_stacks[states]
        idx, states = idx[going], states[going]
        if depth == len(trie.levels) or not len(idx):
            break
        lo, hi = level.child_lo[idx], level.child_hi[idx]
        parents = np.repeat(states, hi - lo)
        idx = expand_ranges(lo, hi)
    ok = end_state >= 0
    if exit_tokens:
        unc = np.concatenate(exit_tokens)
        k = np.concatenate(exit_offsets)
        keep = ~ok[unc]
        return np.flatnonzero(ok), unc[keep], k[keep]
    empty = np.zeros(0, dtype=np.int64)
    return np.flatnonzero(ok), empty, empty


def uncertain_entry(trie: TokenTrie, token_bytes: list[bytes], sorted_idx: np.ndarray,
                     offsets: np.ndarray) -> Uncertain | None:
    if not len(sorted_idx):
        return None
    token_ids, offsets = trie.expand_pairs(sorted_idx, offsets)
    index: dict[bytes, int] = {}
    residual_of = np.empty(len(token_ids), dtype=np.int32)
    for i, (tid, k) in enumerate(zip(token_ids.tolist(), offsets.tolist(), strict=True)):
        residual_of[i] = index.setdefault(token_bytes[tid][k:], len(index))
    residual_list = list(index)
    lengths = np.array([len(r) for r in residual_list], dtype=np.int32)
    residuals = np.zeros((len(residual_list), int(lengths.max())), dtype=np.uint8)
    for row, data in enumerate(residual_list):
        residuals[row, : len(data)] = np.frombuffer(data, dtype=np.uint8)
    return Uncertain(token_ids=token_ids.astype(np.int32), residual_of=residual_of,
                     residuals=residuals, residual_len=lengths)


class Walker(Protocol):
    """Anything with memoised, vectorised byte transitions over interned states."""

    def advance(self, states: np.ndarray, symbols: np.ndarray) -> np.ndarray: ...


def resolve_residuals(core: Walker, unc: Uncertain, start_state: int) -> np.ndarray:
    """The uncertain tokens whose residual bytes are accepted from ``start_state``."""
    states = np.full(len(unc.residual_len), start_state, dtype=np.int64)
    for col in range(unc.residuals.shape[1]):
        active = np.flatnonzero((unc.residual_len > col) & (states >= 0))
        if not len(active):
            break
        states[active] = core.advance(states[active], unc.residuals[active, col])
    return unc.token_ids[(states >= 0)[unc.residual_of]]


class MaskComputer:
    """Run-time masks of parser states, from the position cache plus residual walks, memoised."""

    def __init__(self, core: ParserCore, masks: PositionMasks, vocab_size: int,
                 stop_token_ids: frozenset[int], capacity: int = 4096) -> None:
        self.core = core
        self.masks = masks
        self.vocab_size = vocab_size
        self.stop_words = pack_ids(np.array(sorted(stop_token_ids), dtype=np.int64), vocab_size)
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
        words = np.zeros(masks.accepted.shape[1], dtype=np.uint32)
        for stack in core.state_stacks[state]:
            row = int(masks.row_of_state[core.node_state[stack]])
            np.bitwise_or(words, masks.accepted[row], out=words)
            unc = masks.uncertain[row]
            if unc is not None:
                exit_state = core.exit_state(stack)
                if exit_state != DEAD:
                    set_bits(words, resolve_residuals(core, unc, exit_state))
        if core.can_end(state):
            np.bitwise_or(words, self.stop_words, out=words)
        return words

