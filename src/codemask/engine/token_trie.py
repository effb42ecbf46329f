"""The vocabulary as a byte trie laid out level by level, for vectorised walks.

Tokens are sorted by their bytes; every distinct prefix of length ``d`` is one node of level
``d``. A node knows its byte, its parent on the level above, the contiguous range of sorted tokens
that start with it, the token that *is* that prefix (if any) and the contiguous range of its
children on the level below. Walking the trie from a parser state is then one numpy gather per
level over the live nodes only: common prefixes are parsed once, and a prefix the grammar rejects
removes its whole subtree at once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

import numpy as np


class ByteVocabulary(Protocol):
    """What the engine needs from a vocabulary (see `codemask.vocab.Vocabulary`)."""

    vocab_size: int
    token_bytes: list[bytes]
    special_ids: frozenset[int]
    stop_token_ids: frozenset[int]
    fingerprint: str


@dataclass
class TrieLevel:
    """The nodes at one depth (all arrays have one entry per node)."""

    byte: np.ndarray  # uint8: the node's last byte
    parent: np.ndarray  # int32: index of the parent node on the level above
    lo: np.ndarray  # int32: first sorted token with this prefix
    hi: np.ndarray  # int32: one past the last sorted token with this prefix
    token: np.ndarray  # int32: sorted index of the token equal to this prefix, or -1
    child_lo: np.ndarray  # int32: first child on the next level
    child_hi: np.ndarray  # int32: one past the last child on the next level


@dataclass
class FlatTrie:
    """All levels of a trie in one set of int32 arrays indexed by a global node id (level 0
    first), with children as global id ranges: the layout the parser's C walk reads."""

    byte: np.ndarray  # uint8
    lo: np.ndarray
    hi: np.ndarray
    token: np.ndarray
    child_lo: np.ndarray
    child_hi: np.ndarray
    depth: np.ndarray  # the node's level + 1: how many bytes its prefix has
    offsets: np.ndarray  # int64 [levels + 1]: the global id of each level's first node


@dataclass
class PreorderTrie:
    """The trie's nodes in depth-first preorder (the lexicographic order of their prefixes), each
    with the end of its subtree: a walk is then one forward scan that jumps over a dead subtree,
    reading memory in order, where the level layout sends a depth-first walk to and fro."""

    byte: np.ndarray  # uint8
    depth: np.ndarray  # int32, >= 1
    lo: np.ndarray  # int32: the node's range of sorted tokens
    hi: np.ndarray  # int32
    token: np.ndarray  # int32: the sorted token equal to the node's prefix, or -1
    end: np.ndarray  # int32: the first node after the subtree

    def __post_init__(self) -> None:
        # read-only: the C scan checks read-only arrays once, not at every lexer state it classifies
        for array in (self.byte, self.depth, self.lo, self.hi, self.token, self.end):
            array.flags.writeable = False


class TokenTrie:
    """Sorted vocabulary and its level-by-level trie (tokens with bytes that grammars may use)."""

    def __init__(self, token_bytes: list[bytes], excluded: frozenset[int] | set[int]) -> None:
        all_ids = [i for i, b in enumerate(token_bytes) if b and i not in excluded]
        all_ids.sort(key=lambda i: (token_bytes[i], i))
        # Several ids can spell the same bytes (Gemma's "4" and its byte-fallback <0x34>): the
        # trie holds each byte string once, and `token_ids` expands a row to all its ids.
        ids = [i for n, i in enumerate(all_ids) if n == 0 or token_bytes[i] != token_bytes[all_ids[n - 1]]]
        self.order = np.array(ids, dtype=np.int32)  # sorted index -> (first) token id
        self._duplicates: dict[int, list[int]] = {}
        self._row_of_id: dict[int, np.ndarray] = {}
        row = -1
        for n, i in enumerate(all_ids):
            if n == 0 or token_bytes[i] != token_bytes[all_ids[n - 1]]:
                row += 1
            else:
                self._duplicates.setdefault(row, []).append(i)
        self.lengths = np.array([len(token_bytes[i]) for i in ids], dtype=np.int32)
        self.max_len = int(self.lengths.max()) if ids else 0
        self.matrix = np.zeros((len(ids), max(self.max_len, 1)), dtype=np.uint8)
        for row, i in enumerate(ids):
            data = token_bytes[i]
            self.matrix[row, : len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.levels = self._build_levels()

    @functools.cached_property
    def flat(self) -> FlatTrie:
        """The levels as one `FlatTrie` (built on first use)."""
        sizes = [len(level.byte) for level in self.levels]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

        def cat(name: str, shift: int = 0) -> np.ndarray:
            parts = [getattr(level, name).astype(np.int64) + (offsets[d + shift] if shift else 0)
                     for d, level in enumerate(self.levels)]
            return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, dtype=np.int32)

        depth = np.repeat(np.arange(1, len(sizes) + 1, dtype=np.int32), sizes)
        byte = np.concatenate([level.byte for level in self.levels]) if self.levels else np.zeros(0, np.uint8)
        # child ranges shift by the next level's offset (the deepest level's are empty either way)
        child_lo, child_hi = cat("child_lo", 1), cat("child_hi", 1)
        return FlatTrie(byte=byte.astype(np.uint8), lo=cat("lo"), hi=cat("hi"), token=cat("token"),
                        child_lo=child_lo, child_hi=child_hi, depth=depth, offsets=offsets)

    @functools.cached_property
    def preorder(self) -> PreorderTrie:
        """The nodes in depth-first preorder (built on first use). Tokens are sorted, so a node's
        subtree is the nodes whose first token falls in its range: preorder sorts by (first token,
        depth), and a subtree ends at the first node whose first token is past the range."""
        flat = self.flat
        order = np.lexsort((flat.depth, flat.lo))
        lo = flat.lo[order]
        return PreorderTrie(byte=flat.byte[order], depth=flat.depth[order].astype(np.int32), lo=lo,
                            hi=flat.hi[order], token=flat.token[order],
                            end=np.searchsorted(lo, flat.hi[order], side="left").astype(np.int32))

    @functools.cached_property
    def suffix_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """``(row_start, ids)``: ``ids[row_start[row] + k]`` numbers the bytes ``row[k:]``, equal
        numbers for equal bytes (exactly, no hashing): the suffixes of length ``n`` are numbered
        by the pair (first byte, number of the rest), one ``np.unique`` per length.

        Residual tails of tokens then group by a number instead of by their bytes (or a hash).
        """
        lengths = self.lengths.astype(np.int64)
        row_start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ids = np.zeros(int(row_start[-1]), dtype=np.int64)
        numbered = 0
        for n in range(1, self.max_len + 1):
            rows = np.flatnonzero(lengths >= n)
            at = row_start[rows] + lengths[rows] - n
            rest = ids[at + 1] if n > 1 else np.zeros(len(rows), dtype=np.int64)
            keys, group = np.unique(self.matrix[rows, lengths[rows] - n].astype(np.int64) + 256 * rest,
                                    return_inverse=True)
            ids[at] = numbered + group.reshape(-1)
            numbered += len(keys)
        return row_start, ids

    def suffix_numbers(self, rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The `suffix_ids` number of each ``row[start:]``."""
        row_start, ids = self.suffix_ids
        return ids[row_start[rows] + starts]

    @property
    def has_duplicates(self) -> bool:
        """Whether some tokens spell the same bytes as another (their rows hold more than one id)."""
        return bool(self._duplicates)

    @property
    def num_tokens(self) -> int:
        return len(self.order)

    def token_ids(self, rows: np.ndarray) -> np.ndarray:
        """All token ids spelled by the given sorted rows (duplicates included)."""
        ids = self.order[rows]
        if not self._duplicates:
            return ids
        extra = [i for r in rows.tolist() for i in self._duplicates.get(r, ())]
        return np.concatenate([ids, np.array(extra, dtype=np.int32)]) if extra else ids

    def row_of_id(self, width: int) -> np.ndarray:
        """For token ids ``0 .. width-1``, the sorted row spelling each, or ``num_tokens`` (no row).

        Gathering boolean rows over sorted tokens through this gives rows over token ids.
        """
        table = self._row_of_id.get(width)
        if table is None:
            table = np.full(width, self.num_tokens, dtype=np.int64)
            table[self.order] = np.arange(self.num_tokens)
            for row, ids in self._duplicates.items():
                table[ids] = row
            self._row_of_id[width] = table
        return table

    @functools.cached_property
    def _duplicate_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Per extra id of a row spelled by several: the row's first id, and the extra id."""
        pairs = [(int(self.order[row]), extra) for row, ids in self._duplicates.items() for extra in ids]
        array = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        return array[:, 0], array[:, 1]

    def add_duplicates(self, words: np.ndarray) -> None:
        """In uint32 bitmask rows over token ids (``[..., words]``, in place), set the bit of every
        extra id of a row where the row's first id is set."""
        first, extra = self._duplicate_ids
        if not len(first):
            return
        rows = words.reshape(-1, words.shape[-1])
        have = (rows[:, first >> 5] >> (first & 31).astype(np.uint32)) & 1
        owner, which = np.nonzero(have)
        ids = extra[which]
        np.bitwise_or.at(rows, (owner, ids >> 5), np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))

    def expand_pairs(self, rows: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of ``rows`` with ``values`` repeated alongside, duplicates included."""
        ids = self.order[rows]
        if not self._duplicates:
            return ids, values
        pairs = zip(rows.tolist(), values.tolist(), strict=True)
        extra = [(i, v) for r, v in pairs for i in self._duplicates.get(r, ())]
        if not extra:
            return ids, values
        more = np.array(extra, dtype=np.int64)
        return np.concatenate([ids, more[:, 0].astype(np.int32)]), np.concatenate([values, more[:, 1]])

    def _build_levels(self) -> list[TrieLevel]:
        n = len(self.order)
        levels: list[TrieLevel] = []
        node_of_row = np.zeros(n, dtype=np.int64)  # node index at the previous level, per row
        for depth in range(1, self.max_len + 1):
            rows = np.flatnonzero(self.lengths >= depth)
            prev_node = node_of_row[rows]
            byte = self.matrix[rows, depth - 1]
            new = np.ones(len(rows), dtype=bool)
            new[1:] = (prev_node[1:] != prev_node[:-1]) | (byte[1:] != byte[:-1])
            starts = np.flatnonzero(new)
            first_rows = rows[starts]
            ends = np.append(starts[1:], len(rows)) - 1
            node_ids = np.cumsum(new) - 1
            node_of_row[rows] = node_ids
            token = np.where(self.lengths[first_rows] == depth, first_rows, -1).astype(np.int32)
            levels.append(
                TrieLevel(
                    byte=byte[starts].astype(np.uint8),
                    parent=prev_node[starts].astype(np.int32),
                    lo=first_rows.astype(np.int32),
                    hi=(rows[ends] + 1).astype(np.int32),
                    token=token,
                    child_lo=np.zeros(len(starts), dtype=np.int32),
                    child_hi=np.zeros(len(starts), dtype=np.int32),
                )
            )
        for upper, lower in pairwise(levels):
            ids = np.arange(len(upper.byte))
            upper.child_lo = np.searchsorted(lower.parent, ids, side="left").astype(np.int32)
            upper.child_hi = np.searchsorted(lower.parent, ids, side="right").astype(np.int32)
        return levels


def expand_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenate ``arange(lo[i], hi[i])`` for all i, without a Python loop."""
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts) + np.repeat(lo.astype(np.int64), counts)


_TRIE_CACHE: dict[str, TokenTrie] = {}


def token_trie(vocab: ByteVocabulary) -> TokenTrie:
    """The trie of a vocabulary, built once per vocabulary fingerprint."""
    trie = _TRIE_CACHE.get(vocab.fingerprint)
    if trie is None:
        trie = TokenTrie(vocab.token_bytes, vocab.special_ids | vocab.stop_token_ids)
        _TRIE_CACHE[vocab.fingerprint] = trie
    return trie
