"""The vocabulary trie walked from frame-local parser states, level by level (vectorised), and the
memo of the walks below each first-level node that positions share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from codemask.engine import native
from codemask.engine.parser import DEAD, ParserCore
from codemask.engine.token_trie import TokenTrie, TrieLevel, expand_ranges

# Tokens under the first-level nodes walked in one frontier (bounds the walk's memory).
WALK_BATCH_TOKENS = 1 << 21


# A frontier with at most this many tokens below it is finished by a scalar depth-first walk.
SCALAR_WALK_TOKENS = 64


def first_bytes(core: ParserCore, trie: TokenTrie, starts: list[int]) -> LevelResults:
    """Consume each first-level trie node's byte from every frame-local start state.

    Owners are indices into ``starts``; the results come out grouped by owner, in order.
    """
    live = np.array([i for i, s in enumerate(starts) if s != DEAD], dtype=np.int64)
    if not trie.levels or not len(live):
        return _joined([])
    roots = len(trie.levels[0].byte)
    return _level_step(core, trie.levels[0], 1, np.tile(np.arange(roots, dtype=np.int64), len(live)),
                       np.repeat(np.array(starts, dtype=np.int64)[live], roots), np.repeat(live, roots))


@dataclass
class LevelResults:
    """What one walk found: ok (owner, token) pairs, exit (owner, token, offset) triples, and
    after `_level_step`, the frontier that goes on (nodes, states, owners)."""

    ok_owner: np.ndarray
    ok_token: np.ndarray
    exit_owner: np.ndarray
    exit_token: np.ndarray
    exit_offset: np.ndarray
    idx: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    states: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    owner: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


    def owners_between(self, lo: int, hi: int) -> LevelResults:
        """The findings of owners ``lo .. hi-1`` (each array grouped by owner), renumbered from 0."""
        a, b = np.searchsorted(self.ok_owner, [lo, hi])
        c, d = np.searchsorted(self.exit_owner, [lo, hi])
        e, f = np.searchsorted(self.owner, [lo, hi])
        return LevelResults(self.ok_owner[a:b] - lo, self.ok_token[a:b], self.exit_owner[c:d] - lo,
                            self.exit_token[c:d], self.exit_offset[c:d], self.idx[e:f], self.states[e:f],
                            self.owner[e:f] - lo)

    def reordered(self, order: np.ndarray) -> LevelResults:
        """The same findings with owner ``order[k]`` renumbered ``k``, grouped by the new owners
        (each owner's findings in the order they had)."""
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        owners = np.arange(len(order) + 1)

        def regroup(owner: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
            bounds = np.searchsorted(owner, owners)  # the arrays are grouped by owner: move whole groups
            at = expand_ranges(bounds[order], bounds[order + 1])
            return [rank[owner[at]], *(a[at] for a in arrays)]

        ok_owner, ok_token = regroup(self.ok_owner, self.ok_token)
        exit_owner, exit_token, exit_offset = regroup(self.exit_owner, self.exit_token, self.exit_offset)
        owner, idx, states = regroup(self.owner, self.idx, self.states)
        return LevelResults(ok_owner, ok_token, exit_owner, exit_token, exit_offset, idx, states, owner)

    def found_count(self, owners: int) -> np.ndarray:
        """How many ok and exit findings each owner has here."""
        return np.bincount(self.ok_owner, minlength=owners) + np.bincount(self.exit_owner, minlength=owners)


def _level_step(core: ParserCore, level: TrieLevel, depth: int, idx: np.ndarray, parents: np.ndarray,
                owner: np.ndarray) -> LevelResults:
    """Consume the bytes of ``level``'s nodes ``idx`` from ``parents``; keep the live ones that go on."""
    states = core.advance(parents, level.byte[idx]).astype(np.int64)
    live = states >= 0
    idx, states, owner = idx[live], states[live], owner[live]
    tok = level.token[idx]
    ends = tok >= 0
    exiting = core.flags[states]
    nodes = idx[exiting]
    lo, hi = level.lo[nodes] + (level.token[nodes] >= 0), level.hi[nodes]
    going = core.has_stacks[states] & (level.child_hi[idx] > level.child_lo[idx])
    return LevelResults(owner[ends], tok[ends].astype(np.int64), np.repeat(owner[exiting], hi - lo),
                        expand_ranges(lo, hi), np.full(int((hi - lo).sum()), depth, dtype=np.int64),
                        idx[going], states[going], owner[going])


def _walk_below(core: ParserCore, trie: TokenTrie, idx: np.ndarray, states: np.ndarray,
                 owner: np.ndarray) -> LevelResults:
    """Walk the subtrees below first-level nodes ``idx`` (their byte consumed, reaching ``states``).

    In C where the extension was built (`native`). Otherwise level by level with array operations
    while the frontier is large; once few tokens lie below it (long tokens deep in the trie: runs
    of spaces, rules of dashes) one scalar depth-first walk finishes it, instead of dozens of
    array steps over a handful of nodes each.
    """
    if native.enabled():
        return _walk_below_native(core, trie, idx, states, owner)
    found: list[LevelResults] = []
    for depth in range(2, len(trie.levels) + 1):
        upper = trie.levels[depth - 2]
        if int((upper.hi[idx] - upper.lo[idx]).sum()) <= SCALAR_WALK_TOKENS:
            found.append(_walk_scalar(core, trie, depth - 2, idx, states, owner))
            break
        lo, hi = upper.child_lo[idx], upper.child_hi[idx]
        step = _level_step(core, trie.levels[depth - 1], depth, expand_ranges(lo, hi),
                           np.repeat(states, hi - lo), np.repeat(owner, hi - lo))
        found.append(step)
        idx, states, owner = step.idx, step.states, step.owner
        if not len(idx):
            break
    return _joined(found)


def _walk_below_native(core: ParserCore, trie: TokenTrie, idx: np.ndarray, states: np.ndarray,
                       owner: np.ndarray) -> LevelResults:
    flat = trie.flat
    lo, hi = flat.child_lo[idx], flat.child_hi[idx]
    ok_owner, ok_token, exit_owner, exit_lo, exit_hi, exit_depth = native.walk(
        core, flat, expand_ranges(lo, hi), np.repeat(states, hi - lo), np.repeat(owner, hi - lo))
    span = exit_hi - exit_lo
    return LevelResults(ok_owner.astype(np.int64), ok_token.astype(np.int64),
                        np.repeat(exit_owner.astype(np.int64), span), expand_ranges(exit_lo, exit_hi),
                        np.repeat(exit_depth.astype(np.int64), span))


def _walk_scalar(core: ParserCore, trie: TokenTrie, level_index: int, idx: np.ndarray, states: np.ndarray,
                 owner: np.ndarray) -> LevelResults:
    """`_level_step` repeated to the bottom, one node at a time, for the frontier ``idx`` on level
    ``level_index`` (same findings, in another order)."""
    ok_owner: list[int] = []
    ok_token: list[int] = []
    exit_owner: list[int] = []
    exit_lo: list[int] = []
    exit_hi: list[int] = []
    exit_depth: list[int] = []
    levels = trie.levels
    todo = list(zip([level_index] * len(idx), idx.tolist(), states.tolist(), owner.tolist(), strict=True))
    while todo:
        at, node, state, who = todo.pop()
        if at + 1 >= len(levels):
            continue
        upper, level = levels[at], levels[at + 1]
        for child in range(int(upper.child_lo[node]), int(upper.child_hi[node])):
            nxt = core.step(state, int(level.byte[child]))
            if nxt < 0:
                continue
            token = int(level.token[child])
            if token >= 0:
                ok_owner.append(who)
                ok_token.append(token)
            if core.flags[nxt]:
                exit_owner.append(who)
                exit_lo.append(int(level.lo[child]) + (token >= 0))
                exit_hi.append(int(level.hi[child]))
                exit_depth.append(at + 2)
            if core.has_stacks[nxt] and level.child_hi[child] > level.child_lo[child]:
                todo.append((at + 1, child, nxt, who))
    lo, hi = np.array(exit_lo, dtype=np.int64), np.array(exit_hi, dtype=np.int64)
    return LevelResults(np.array(ok_owner, dtype=np.int64), np.array(ok_token, dtype=np.int64),
                        np.repeat(np.array(exit_owner, dtype=np.int64), hi - lo), expand_ranges(lo, hi),
                        np.repeat(np.array(exit_depth, dtype=np.int64), hi - lo))


def _joined(parts: list[LevelResults]) -> LevelResults:
    empty = np.zeros(0, dtype=np.int64)
    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts]) if parts else empty
    return LevelResults(cat("ok_owner"), cat("ok_token"), cat("exit_owner"), cat("exit_token"), cat("exit_offset"))


class SubtreeMemo:
    """Walk results below a first-level trie node, per (node, parser state after its byte).

    Positions of one grammar very often reach the same parser state after their first byte (the
    content of every string that is not a known key, say, after one character of it), and
    everything below depends only on that pair: each subtree is walked once per grammar, and
    wide positions cost a gather instead of a walk over most of the vocabulary.
    """

    def __init__(self, core: ParserCore, trie: TokenTrie) -> None:
        self.core, self.trie = core, trie
        self._index: dict[tuple[int, int], int] = {}
        self._ok_token = GrowingArray()
        self._exit_token = GrowingArray()
        self._exit_offset = GrowingArray()
        self._ok_bounds = np.zeros(1, dtype=np.int64)
        self._exit_bounds = np.zeros(1, dtype=np.int64)
        self._rows: dict[int, np.ndarray] = {}  # per entry used by a dense chunk: its ok tokens as a row

    def dense_rows(self, ids: np.ndarray, found: LevelResults, count: int) -> np.ndarray:
        """The ok tokens below the first bytes of ``found`` (memo ``ids`` of its frontier) as
        boolean rows over the sorted vocabulary, one per owner.

        The tokens below distinct first-level nodes are disjoint ranges of rows, in node order, so
        an owner's row is the concatenation of its entries' rows (kept per entry, `_entry_row`)
        with zeros between: a few hundred slices instead of a scatter of most of the vocabulary.
        """
        n = self.trie.num_tokens
        rows = np.zeros((count, n), dtype=bool)
        zeros = np.zeros(n, dtype=bool)
        level = self.trie.levels[0]
        starts, ends = level.lo[found.idx].tolist(), level.hi[found.idx].tolist()
        bounds = np.searchsorted(found.owner, np.arange(count + 1)).tolist()
        entries = ids.tolist()
        for owner in range(count):
            pieces, at = [], 0
            for k in range(bounds[owner], bounds[owner + 1]):
                if starts[k] > at:
                    pieces.append(zeros[: starts[k] - at])
                pieces.append(self._entry_row(entries[k], starts[k], ends[k]))
                at = ends[k]
            if pieces:
                pieces.append(zeros[: n - at])
                np.concatenate(pieces, out=rows[owner])
        return rows

    def _entry_row(self, entry: int, start: int, end: int) -> np.ndarray:
        """Memo ``entry``'s ok tokens as a boolean row over the sorted vocabulary's rows ``start .. end``
        (those below its first-level node)."""
        found = self._rows.get(entry)
        if found is None:
            found = np.zeros(end - start, dtype=bool)
            found[self._ok_token.view()[self._ok_bounds[entry]:self._ok_bounds[entry + 1]] - start] = True
            self._rows[entry] = found
        return found

    def walk_new(self, nodes: np.ndarray, states: np.ndarray) -> None:
        """Walk the subtrees of the (node, state) pairs not seen before, a bounded batch at a time."""
        level = self.trie.levels[0]
        batch: list[tuple[int, int]] = []
        tokens = 0
        for key in dict.fromkeys(zip(nodes.tolist(), states.tolist(), strict=True)):
            if key in self._index:
                continue
            self._index[key] = len(self._index)
            batch.append(key)
            tokens += int(level.hi[key[0]] - level.lo[key[0]])
            if tokens >= WALK_BATCH_TOKENS:
                self._walk(batch)
                batch, tokens = [], 0
        if batch:
            self._walk(batch)

    def _walk(self, batch: list[tuple[int, int]]) -> None:
        pairs = np.array(batch, dtype=np.int64)
        found = _walk_below(self.core, self.trie, pairs[:, 0], pairs[:, 1], np.arange(len(batch), dtype=np.int64))
        self._store(found, len(batch))

    def ids(self, nodes: np.ndarray, states: np.ndarray) -> np.ndarray:
        """The memo ids of (node, state) pairs (walked by `walk_new` before)."""
        index = self._index
        return np.array([index[k] for k in zip(nodes.tolist(), states.tolist(), strict=True)], dtype=np.int64)

    def _store(self, found: LevelResults, count: int) -> None:
        ok_order = np.argsort(found.ok_owner, kind="stable")
        exit_order = np.argsort(found.exit_owner, kind="stable")
        self._ok_token.extend(found.ok_token[ok_order])
        self._exit_token.extend(found.exit_token[exit_order])
        self._exit_offset.extend(found.exit_offset[exit_order])
        owners = np.arange(count + 1)
        ok_ends = np.searchsorted(found.ok_owner[ok_order], owners[1:], side="left")
        exit_ends = np.searchsorted(found.exit_owner[exit_order], owners[1:], side="left")
        self._ok_bounds = np.concatenate([self._ok_bounds, self._ok_bounds[-1] + ok_ends])
        self._exit_bounds = np.concatenate([self._exit_bounds, self._exit_bounds[-1] + exit_ends])

    def found_count(self, first: LevelResults, owners: int) -> np.ndarray:
        """How many ok and exit findings each owner of ``first`` has below its first bytes."""
        ids = self.ids(first.idx, first.states)
        bounds = (self._ok_bounds, self._exit_bounds)
        sizes = sum(b[ids + 1] - b[ids] for b in bounds)
        return np.bincount(first.owner, weights=sizes, minlength=owners).astype(np.int64)

    def gather(self, ids: np.ndarray, owners: np.ndarray, with_exits: np.ndarray, with_ok: bool = True) -> LevelResults:
        """The stored results of memo ``ids``, relabelled with ``owners`` (exits only where
        ``with_exits``, ok tokens only ``with_ok``)."""
        ok_lo, ok_hi = self._ok_bounds[ids], self._ok_bounds[ids + 1]
        if not with_ok:
            ok_hi = ok_lo
        ex_lo, ex_hi = self._exit_bounds[ids], self._exit_bounds[ids + 1]
        ex_hi = np.where(with_exits, ex_hi, ex_lo)
        ok_at, ex_at = expand_ranges(ok_lo, ok_hi), expand_ranges(ex_lo, ex_hi)
        return LevelResults(np.repeat(owners, ok_hi - ok_lo), self._ok_token.view()[ok_at],
                            np.repeat(owners, ex_hi - ex_lo), self._exit_token.view()[ex_at],
                            self._exit_offset.view()[ex_at])


class GrowingArray:
    """An int64 array appended to in amortised O(appended): the memo grows a walk at a time while
    matchers run, and re-joining everything on each growth made lazy classification quadratic."""

    def __init__(self) -> None:
        self._data = np.zeros(1024, dtype=np.int64)
        self._size = 0

    def extend(self, values: np.ndarray) -> None:
        end = self._size + len(values)
        if end > len(self._data):
            grown = np.zeros(max(end, 2 * len(self._data)), dtype=np.int64)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : end] = values
        self._size = end

    def view(self) -> np.ndarray:
        return self._data[: self._size]
