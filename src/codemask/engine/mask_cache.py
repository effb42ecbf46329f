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
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np
from tqdm import tqdm

from codemask.engine import native
from codemask.engine.automaton import RTN
from codemask.engine.parser import DEAD, ParserCore
from codemask.engine.token_trie import TokenTrie, TrieLevel, expand_ranges

# Assembling masks: a position is wide when at least 1/DENSE_FRACTION of the vocabulary is ok or exits;
# wide ones are built as dense boolean rows DENSE_CHUNK at a time, narrow ones as sparse bit sets,
# up to SPARSE_CHUNK positions or SPARSE_TOKENS findings at a time.
DENSE_FRACTION = 64
SPARSE_CHUNK = 512
SPARSE_TOKENS = 1 << 18
DENSE_CHUNK = 16
# Tokens under the first-level nodes walked in one frontier (bounds the walk's memory).
WALK_BATCH_TOKENS = 1 << 21
# A frontier with at most this many tokens below it is finished by a scalar depth-first walk.
SCALAR_WALK_TOKENS = 64
# A position whose frame more tokens than this may leave (the inside of a counting rule: most of
# the vocabulary crosses its block's end) lists none of them (`Uncertain.direct`): checking that
# many residuals against each caller cost more than scanning the trie from the parser's state.
MAX_LISTED_UNCERTAIN = 16384


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


class PositionClassifier:
    """Classifies the vocabulary at positions of one grammar: the work behind the mask cache.

    All positions of a call take their first byte in one vectorised step; below the first byte,
    each (trie node, parser state) subtree is walked once and shared (`SubtreeMemo`), across calls
    too, so positions classified later (lazily, when a parser state first needs them) reuse what
    earlier ones walked. Positions are assembled in chunks of similar width: narrow ones (a
    property name's bytes allow a handful of tokens) many at a time with sparse bit sets, wide
    ones (inside a free string) a few at a time with dense rows.
    """

    def __init__(self, core: ParserCore, trie: TokenTrie, vocab_size: int, *, share: bool = True) -> None:
        if core.lazy:
            raise ValueError("byte-level position masks need an expanded parser core, not ParserCore(lazy=True) "
                             "(a lazy core's nodes stand in call states, which have no position mask)")
        self.core, self.trie, self.vocab_size = core, trie, vocab_size
        self.share = share
        self._memo = SubtreeMemo(core, trie)

    @functools.cached_property
    def _with_callers(self) -> set[int]:
        return self.core.rtn.rules_with_callers()

    @functools.cached_property
    def _follow(self) -> np.ndarray:
        return self.core.rtn.follow_bytes()

    @functools.cached_property
    def _signatures(self) -> RuleSignatures:
        return RuleSignatures(self.core.rtn)

    def classify(self, positions: np.ndarray,
                 progress: str | None = None) -> tuple[np.ndarray, list[Uncertain | None]]:
        """Per position: its accepted bitmask row and its uncertain tokens (None if none).

        Positions whose rule (with everything it calls) some earlier grammar had too come from
        the process-wide `SharedPositions`; the others are walked, then shared.
        """
        accepted = np.zeros((len(positions), num_words(self.vocab_size)), dtype=np.uint32)
        uncertain: list[Uncertain | None] = [None] * len(positions)
        shared = SharedPositions.of(self.trie)
        keys = [self._shared_key(int(p)) if self.share else None for p in positions]
        missing = []
        for i, key in enumerate(keys):
            found = shared.get(key) if key is not None else None
            if found is None:
                missing.append(i)
            else:
                accepted[i], uncertain[i] = found
        if missing:
            walked = np.array(missing, dtype=np.int64)
            walk = self._walk_native if native.enabled() else self._walk
            accepted[walked], walked_uncertain = walk(positions[walked], progress)
            for i, unc in zip(missing, walked_uncertain, strict=True):
                uncertain[i] = unc
                key = keys[i]
                if key is not None:
                    shared.put(key, accepted[i].copy(), unc)
        return accepted, [self._followed(int(p), unc) for p, unc in zip(positions, uncertain, strict=True)]

    def _shared_key(self, position: int) -> tuple[object, ...] | None:
        """What a position's classification depends on, if its rule calls no recursion.

        That is the rule's automaton with its callees' (the signature), the position in it, and
        whether the rule has callers; for a rule that is not `RTN.is_shared`, also the bytes
        that may follow it, which filter its uncertain tokens during the walk. A shared rule (a
        free string: a value here, an array item or a key there) is walked without that filter,
        so that every grammar can use its classification, and filtered afterwards (`_followed`).
        """
        rtn = self.core.rtn
        rule = int(rtn.state_rule[position])
        signature = self._signatures[rule]
        if signature is None:
            return None
        local = position - int(np.searchsorted(rtn.state_rule, rule))
        if rtn.is_shared(rule):
            return signature, local, rule in self._with_callers
        return signature, local, rule in self._with_callers, self._follow[rule].tobytes()

    def _followed(self, position: int, unc: Uncertain | None) -> Uncertain | None:
        """A shared rule's ``unc`` without the tokens whose residual begins with a byte no caller takes."""
        rule = int(self.core.rtn.state_rule[position])
        if unc is None or not self.core.rtn.is_shared(rule):
            return unc
        return unc.restricted(self._follow[rule][self.trie.matrix[unc.residual_rows, unc.residual_starts]])

    def _walk(self, positions: np.ndarray, progress: str | None) -> tuple[np.ndarray, list[Uncertain | None]]:
        core, trie = self.core, self.trie
        accepted = np.zeros((len(positions), num_words(self.vocab_size)), dtype=np.uint32)
        uncertain: list[Uncertain | None] = [None] * len(positions)
        starts = [core.frame_state(int(p)) for p in positions]
        first = first_bytes(core, trie, starts)
        self._memo.walk_new(first.idx, first.states)
        widths = first.found_count(len(starts)) + self._memo.found_count(first, len(starts))
        order = np.argsort(widths, kind="stable")
        first = first.reordered(order)
        bar = tqdm(total=len(positions), desc=progress or "compiling grammar", unit="pos", delay=1.0,
                   leave=False, disable=progress is None)
        for lo, hi, dense in _chunks(widths[order], trie.num_tokens):
            rows = order[lo:hi]
            walk = classify_chunk(trie, first, self._memo, lo, hi - lo, dense, self._exits_kept(positions[rows]))
            accepted[rows] = walk.packed(trie, self.vocab_size)
            for row, unc in zip(rows.tolist(), self._uncertain(positions[rows], walk), strict=True):
                uncertain[row] = unc
            bar.update(hi - lo)
        bar.close()
        return accepted, uncertain

    def _walk_native(self, positions: np.ndarray,
                     progress: str | None) -> tuple[np.ndarray, list[Uncertain | None]]:
        """`_walk` in C: one trie scan per position (`native.classify_position`), the exits kept
        where a caller can continue them (`_rule_exits`)."""
        core, trie = self.core, self.trie
        walker = native.position_walker(trie, self.vocab_size)
        has_callers, first_byte = self._rule_exits
        rules = core.rtn.state_rule[positions].tolist()
        accepted = np.zeros((len(positions), num_words(self.vocab_size)), dtype=np.uint32)
        uncertain: list[Uncertain | None] = [None] * len(positions)
        # (no bar at all without a label: making one, even disabled, took milliseconds)
        bar = None if progress is None else tqdm(total=len(positions), desc=progress, unit="pos", delay=1.0,
                                                 leave=False)
        for k, (position, rule) in enumerate(zip(positions.tolist(), rules, strict=True)):
            if bar is not None:
                bar.update(1)
            start = core.frame_state(position)
            if start != DEAD:
                follow = first_byte[rule] if has_callers[rule] else None
                accepted[k], found = native.classify_position(walker, core, start, follow, MAX_LISTED_UNCERTAIN,
                                                              self._walk_memo)
                if found is None:
                    uncertain[k] = Uncertain.unlisted()
                    continue
                rows, residual_of, residual_rows, starts, lengths = found
                if len(rows):
                    token_ids, residual_of = trie.expand_pairs(rows, residual_of)
                    uncertain[k] = Uncertain(token_ids=token_ids.astype(np.int32, copy=False),
                                             residual_of=residual_of.astype(np.int32, copy=False),
                                             residual_rows=residual_rows, residual_starts=starts,
                                             residual_len=lengths)
        if bar is not None:
            bar.close()
        if trie.has_duplicates:
            trie.add_duplicates(accepted)
        return accepted, uncertain

    @functools.cached_property
    def _walk_memo(self) -> native.WalkMemo:
        return native.walk_memo()

    @functools.cached_property
    def _rule_exits(self) -> tuple[np.ndarray, np.ndarray]:
        """Per rule: whether leaving its frame can continue in a caller (else the residual would
        follow the end of the input and is refused), and the bytes a residual may begin with: the
        follow bytes, or any byte for a shared rule (filtered after sharing: see `_followed`)."""
        rtn = self.core.rtn
        count = len(rtn.rule_names)
        has_callers = np.zeros(count, dtype=bool)
        has_callers[list(self._with_callers)] = True
        shared = rtn.shared if rtn.shared is not None else np.zeros(count, dtype=bool)
        return has_callers, self._follow | shared[:, None]

    def _exits_kept(self, positions: np.ndarray) -> ExitFilter:
        """Which exits of starts at ``positions`` can be uncertain tokens."""
        has_callers, first_byte = self._rule_exits
        rules = self.core.rtn.state_rule[positions]
        return ExitFilter(has_callers[rules], first_byte[rules], self.trie.matrix)

    def _uncertain(self, positions: np.ndarray, walk: FrameWalk) -> list[Uncertain | None]:
        """The uncertain tokens of each start of ``walk`` (at ``positions``), all at once."""
        owner = np.concatenate([found.exit_owner for found in walk.sources])
        rows = np.concatenate([found.exit_token for found in walk.sources])
        offsets = np.concatenate([found.exit_offset for found in walk.sources])
        if len(walk.sources) > 1:  # per owner: its first-byte exits, then the memo's
            by_owner = np.argsort(owner, kind="stable")
            owner, rows, offsets = owner[by_owner], rows[by_owner], offsets[by_owner]
        return uncertain_entries(self.trie, owner, rows, offsets, len(positions))


class SharedPositions:
    """Position classifications shared by every grammar of the process, per vocabulary trie.

    A position's classification depends only on its rule's automaton and those of the rules it
    calls (the frame is walked in isolation), plus the bytes that may follow the rule; generated
    grammars (JSON Schema) have the same string, number and whitespace rules again and again,
    so a server compiling a schema per request walks each of them once. Bounded, least recently
    used out first.
    """

    CAPACITY = 2048
    _by_trie: ClassVar[dict[int, tuple[TokenTrie, SharedPositions]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[object, ...], tuple[np.ndarray, Uncertain | None]] = OrderedDict()
        self.hits = 0

    @classmethod
    def of(cls, trie: TokenTrie) -> SharedPositions:
        with cls._lock:
            found = cls._by_trie.get(id(trie))
            if found is None or found[0] is not trie:
                found = cls._by_trie[id(trie)] = (trie, cls())
            return found[1]

    def get(self, key: tuple[object, ...]) -> tuple[np.ndarray, Uncertain | None] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return found

    def clear(self) -> None:
        """Forget every shared position (the next grammars walk their own)."""
        with self._lock:
            self._entries.clear()

    @classmethod
    def clear_all(cls) -> None:
        """`clear` the shared positions of every vocabulary."""
        with cls._lock:
            tables = [table for _trie, table in cls._by_trie.values()]
        for table in tables:
            table.clear()

    def put(self, key: tuple[object, ...], accepted: np.ndarray, uncertain: Uncertain | None) -> None:
        with self._lock:
            self._entries[key] = (accepted, uncertain)
            if len(self._entries) > self.CAPACITY:
                self._entries.popitem(last=False)


class RuleSignatures:
    """Per rule, a digest of its automaton and, recursively, of every rule it calls.

    Equal digests mean equal frame-local behaviour, so positions can be shared between grammars.
    Rules that are recursive or call a recursive rule get None (their digest would need a fixed
    point; they are walked per grammar). Digests are made when first asked for (a position's rule
    and the rules it calls): hashing every rule of a large grammar took longer than its first masks.
    """

    def __init__(self, rtn: RTN) -> None:
        self.rtn = rtn
        count = len(rtn.rule_names)
        self._starts = np.searchsorted(rtn.state_rule, np.arange(count)).tolist()
        self._ends = np.searchsorted(rtn.state_rule, np.arange(count), side="right").tolist()
        _call_lo, callee, _ret = rtn.call_table
        pairs = np.array(sorted(set((rtn.state_rule[rtn.call_sites].astype(np.int64) * count + callee).tolist())),
                         dtype=np.int64)  # (not np.unique: its first call in a process imports numpy.ma, 12 ms)
        self._callees: list[list[int]] = [[] for _ in range(count)]
        for owner, called in zip((pairs // count).tolist(), (pairs % count).tolist(), strict=True):
            self._callees[owner].append(called)
        self._recursive = self._reaching_recursion()
        self._digests: dict[int, bytes] = {}

    def _reaching_recursion(self) -> list[bool]:
        """Per rule, whether it is recursive or calls (through any chain) a recursive rule."""
        count = len(self._callees)
        out = [False] * count
        color = [0] * count  # 0 unseen, 1 on the depth-first stack, 2 done
        for root in range(count):
            if color[root]:
                continue
            stack = [root]
            while stack:
                rule = stack[-1]
                if color[rule] == 0:
                    color[rule] = 1
                    for callee in self._callees[rule]:
                        if color[callee] == 1:
                            out[rule] = True  # a call back into the stack: recursion
                        elif color[callee] == 0:
                            stack.append(callee)
                    continue
                stack.pop()
                if color[rule] == 2:
                    continue
                color[rule] = 2
                out[rule] = out[rule] or any(out[c] for c in self._callees[rule])
        return out

    def __getitem__(self, rule: int) -> bytes | None:
        if self._recursive[rule]:
            return None
        todo = [rule]
        while todo:  # callees first (no recursion below a rule that does not reach any)
            top = todo[-1]
            missing = [c for c in self._callees[top] if c not in self._digests]
            if missing:
                todo.extend(missing)
                continue
            todo.pop()
            if top not in self._digests:
                self._digests[top] = _rule_digest(self.rtn, top, self._starts[top], self._ends[top], self._digests)
        return self._digests[rule]


def _rule_digest(rtn: RTN, rule: int, lo: int, hi: int, callee_digests: dict[int, bytes]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    trans = rtn.trans[lo:hi]
    h.update(np.where(trans >= 0, trans - lo, -1).astype(np.int32).tobytes())
    h.update(rtn.accepting[lo:hi].tobytes())
    h.update(int(rtn.rule_start[rule] - lo).to_bytes(4, "little"))
    for state in range(lo, hi):
        for callee, target in rtn.calls[state]:
            h.update((state - lo).to_bytes(4, "little") + callee_digests[callee] + (target - lo).to_bytes(4, "little"))
    return h.digest()


class LazyPositionMasks:
    """Position masks classified the first time a parser state needs them (the default).

    Compiling then costs only the automata, and a schema compiled per request never pays for the
    positions its output does not visit; the new positions of one parser state are classified
    together, and later ones reuse the subtree walks of earlier ones.
    """

    def __init__(self, core: ParserCore, trie: TokenTrie, vocab_size: int) -> None:
        self._classifier = PositionClassifier(core, trie, vocab_size)
        self.row_of_state = np.full(core.rtn.num_states, -1, dtype=np.int32)
        self._accepted: list[np.ndarray] = []
        self._uncertain: list[Uncertain | None] = []
        self._lock = threading.Lock()

    @property
    def num_classified(self) -> int:
        return len(self._accepted)

    def rows(self, positions: list[int]) -> list[int]:
        """The rows of ``positions``, classifying those not seen before in one batch."""
        rows = self.row_of_state[positions]
        if (rows < 0).any():
            with self._lock:
                self._classify_missing(positions)
            rows = self.row_of_state[positions]
        return rows.tolist()

    def _classify_missing(self, positions: list[int]) -> None:
        missing = np.array(sorted({p for p in positions if self.row_of_state[p] < 0}), dtype=np.int64)
        if not len(missing):
            return  # another thread classified them while this one waited
        accepted, uncertain = self._classifier.classify(missing)
        base = len(self._accepted)
        self._accepted.extend(accepted)
        self._uncertain.extend(uncertain)
        self.row_of_state[missing] = np.arange(base, base + len(missing), dtype=np.int32)

    def accepted_row(self, row: int) -> np.ndarray:
        return self._accepted[row]

    def uncertain_of(self, row: int) -> Uncertain | None:
        return self._uncertain[row]


def _chunks(widths: np.ndarray, num_tokens: int) -> list[tuple[int, int, bool]]:
    """Split positions sorted by width into (lo, hi, dense) chunks of bounded total work."""
    out: list[tuple[int, int, bool]] = []
    lo = 0
    while lo < len(widths):
        dense = bool(widths[lo] * DENSE_FRACTION >= num_tokens)
        limit = DENSE_CHUNK if dense else SPARSE_CHUNK
        hi = lo + 1
        total = int(widths[lo])
        while hi < len(widths) and hi - lo < limit and (dense or total + widths[hi] <= SPARSE_TOKENS):
            total += int(widths[hi])
            hi += 1
        out.append((lo, hi, dense))
        lo = hi
    return out


@dataclass
class FrameWalk:
    """The classification of the vocabulary from several frame-local start states at once.

    A token is *ok* from a start when all its bytes are consumed with the parse still alive; it
    is *uncertain* (with the offset where the frame ended) when a prefix of it reaches the
    frame's bottom and it is not ok. Tokens that are neither are rejected from that start.
    Findings come from two sources, each grouped by start: the first byte's step and the
    memoised subtrees below it. ``dense`` holds the ok tokens as boolean rows when the chunk
    is wide.
    """

    sources: tuple[LevelResults, ...]
    count: int
    dense: np.ndarray | None

    def drop_ok_exits(self, num_tokens: int) -> None:
        """Remove exits of tokens that are ok from the same start (they are not uncertain)."""
        if self.dense is not None:
            dense = self.dense
            self.sources = tuple(_exits_where(found, ~dense[found.exit_owner, found.exit_token])
                                 for found in self.sources)
            return
        ok_keys = np.sort(np.concatenate([found.ok_owner * num_tokens + found.ok_token for found in self.sources]))
        self.sources = tuple(_exits_where(found, ~_member(found.exit_owner * num_tokens + found.exit_token, ok_keys))
                             for found in self.sources)

    def packed(self, trie: TokenTrie, vocab_size: int) -> np.ndarray:
        """The ok tokens as uint32 bitmask rows over token ids, one per start."""
        if self.dense is not None:
            return pack_rows(trie, self.dense, vocab_size)
        words = np.zeros((self.count, num_words(vocab_size)), dtype=np.uint32)
        owner = np.concatenate([found.ok_owner for found in self.sources])
        ids, owner = trie.expand_pairs(np.concatenate([found.ok_token for found in self.sources]), owner)
        ids = ids.astype(np.int64)
        np.bitwise_or.at(words, (owner, ids >> 5), np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))
        return words


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
class ExitFilter:
    """Which exits of a chunk's starts are kept: none for a start whose frame has no caller, and
    those whose residual begins with a byte its frame may be followed by."""

    callers: np.ndarray  # bool [starts]
    first_byte: np.ndarray  # bool [starts, 256]
    matrix: np.ndarray  # the trie's byte matrix

    def apply(self, found: LevelResults) -> LevelResults:
        owner = found.exit_owner
        keep = self.first_byte[owner, self.matrix[found.exit_token, found.exit_offset]]
        return _exits_where(found, keep & self.callers[owner])


def classify_chunk(trie: TokenTrie, first: LevelResults, memo: SubtreeMemo, lo: int, count: int,
                   dense: bool, exits: ExitFilter) -> FrameWalk:
    """The classification from starts ``lo .. lo+count-1``, from their first bytes and the memo,
    keeping the exits that ``exits`` keeps."""
    here = first.owners_between(lo, lo + count)
    ids = memo.ids(here.idx, here.states)
    below = memo.gather(ids, here.owner, exits.callers[here.owner], with_ok=not dense)
    walk = FrameWalk((exits.apply(here), exits.apply(below)), count, None)
    if dense:
        ok = memo.dense_rows(ids, here, count)
        ok.reshape(-1)[here.ok_owner * trie.num_tokens + here.ok_token] = True
        walk.dense = ok
    walk.drop_ok_exits(trie.num_tokens)
    return walk


def _member(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Which ``keys`` occur in ``sorted_keys`` (a binary search each: cheaper than ``np.isin``)."""
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return np.asarray(sorted_keys[at] == keys)


def _exits_where(found: LevelResults, keep: np.ndarray) -> LevelResults:
    return LevelResults(found.ok_owner, found.ok_token, found.exit_owner[keep], found.exit_token[keep],
                        found.exit_offset[keep])


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


def pack_rows(trie: TokenTrie, ok: np.ndarray, vocab_size: int) -> np.ndarray:
    """uint32 bitmask rows (token ids) from boolean rows over the trie's sorted tokens."""
    padded = np.concatenate([ok, np.zeros((ok.shape[0], 1), dtype=bool)], axis=1)
    allowed = np.take(padded, trie.row_of_id(num_words(vocab_size) * 32), axis=1)
    return np.packbits(allowed, axis=1, bitorder="little").view(np.uint32)


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
        words = np.zeros(num_words(self.vocab_size), dtype=np.uint32)
        stacks = core.state_stacks[state]
        rows = masks.rows([core.node_state[stack] for stack in stacks])
        for stack, row in zip(stacks, rows, strict=True):
            np.bitwise_or(words, masks.accepted_row(row), out=words)
            unc = masks.uncertain_of(row)
            if unc is not None and unc.direct:
                alone = core.closure([stack])  # (the parse of this stack alone: its mask, uncertain tokens included)
                if alone != DEAD:
                    np.bitwise_or(words, native.state_mask(native.position_walker(self.trie, self.vocab_size), core,
                                                           alone), out=words)
            elif unc is not None:
                exit_state = core.exit_state(stack)
                if exit_state == DEAD:
                    continue
                if native.enabled():
                    native.resolve_residuals(native.position_walker(self.trie, self.vocab_size), core, exit_state,
                                             unc.residual_rows, unc.residual_starts, unc.residual_len,
                                             unc.token_ids, unc.residual_of, words)
                else:
                    set_bits(words, resolve_residuals(core, unc, exit_state, self.trie.matrix))
        if core.can_end(state):
            np.bitwise_or(words, self.stop_words, out=words)
        return words

