"""The classification of the vocabulary at a grammar's positions: accepted, uncertain (with
their residuals) or rejected, in chunks of positions of similar width.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from codemask.engine import native
from codemask.engine.automaton import RuleCalls
from codemask.engine.bitmask import bitmask_width
from codemask.engine.parser import DEAD, ParserCore
from codemask.engine.shared_positions import MAX_SHARED_STATES, RuleSignatures, SharedPositions
from codemask.engine.string_chains import CharCounts, Span, StringChains, free_string_rtn
from codemask.engine.token_trie import TokenTrie
from codemask.engine.trie_walk import LevelResults, SubtreeMemo, first_bytes
from codemask.engine.uncertain import Uncertain, uncertain_entries

# Assembling masks: a position is wide when at least 1/DENSE_FRACTION of the vocabulary is ok or exits;
# wide ones are built as dense boolean rows DENSE_CHUNK at a time, narrow ones as sparse bit sets,
# up to SPARSE_CHUNK positions or SPARSE_TOKENS findings at a time.
DENSE_FRACTION = 64


SPARSE_CHUNK = 512


SPARSE_TOKENS = 1 << 18


DENSE_CHUNK = 16


# A position whose frame more tokens than this may leave (the inside of a counting rule: most of
# the vocabulary crosses its block's end) lists none of them (`Uncertain.direct`): checking that
# many residuals against each caller cost more than scanning the trie from the parser's state.
MAX_LISTED_UNCERTAIN = 16384


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
        # per rule met so far: what its positions' `_shared_key` takes from it, and its `_exit_flags`
        self._key_parts: dict[int, tuple[bytes, bool, bytes | None] | None] = {}
        self._exit_flag_bytes: dict[int, bytes | None] = {}

    @functools.cached_property
    def _chains(self) -> StringChains:
        return StringChains(self.core.rtn, self._calls)

    @functools.cached_property
    def _calls(self) -> RuleCalls:
        return self.core.rtn.rule_calls(MAX_SHARED_STATES)

    @functools.cached_property
    def _follow(self) -> np.ndarray:
        return self.core.rtn.follow_bytes()

    @functools.cached_property
    def _signatures(self) -> RuleSignatures:
        return RuleSignatures(self.core.rtn, self._calls)

    def classify(self, positions: np.ndarray,
                 progress: str | None = None) -> tuple[np.ndarray, list[Uncertain | None]]:
        """Per position: its accepted bitmask row and its uncertain tokens (None if none).

        Positions whose rule (with everything it calls) some earlier grammar had too come from
        the process-wide `SharedPositions`; those of a bounded string (or of a counted one's
        blocks) are the free string's classification filtered by length (`string_chains`); the
        others are walked. All are then shared.
        """
        uncertain: list[Uncertain | None] = [None] * len(positions)
        shared = SharedPositions.of(self.trie)
        keys = [self._shared_key(p) for p in positions.tolist()] if self.share else [None] * len(positions)
        found_rows: dict[int, np.ndarray] = {}
        missing = []
        for i, key in enumerate(keys):
            found = shared.get(key) if key is not None else None
            if found is None:
                missing.append(i)
            else:
                found_rows[i], uncertain[i] = found
        bounded = {i: span for i in missing if (span := self._chains.span(int(positions[i])))}
        if len(missing) == len(positions) and not bounded:
            # (the usual batch of a lazy mask: every position walked, no copy through an index)
            accepted, uncertain = self._walk_any(positions, progress)
        else:
            accepted = np.zeros((len(positions), bitmask_width(self.vocab_size)), dtype=np.uint32)
            for i, row in found_rows.items():
                accepted[i] = row
            self._classify_some(positions, missing, bounded, accepted, uncertain, progress)
        for i in missing:
            key = keys[i]
            if key is not None:
                shared.put(key, accepted[i].copy(), uncertain[i])
        return accepted, [self._followed(int(p), unc) for p, unc in zip(positions, uncertain, strict=True)]

    def _classify_some(self, positions: np.ndarray, missing: list[int], bounded: dict[int, Span],
                       accepted: np.ndarray, uncertain: list[Uncertain | None], progress: str | None) -> None:
        """`classify` of the ``missing`` positions into ``accepted`` and ``uncertain``: the
        ``bounded`` strings filtered from the free string's classification, the others walked."""
        walked = [i for i in missing if i not in bounded]
        if walked:
            accepted[walked], walked_uncertain = self._walk_any(positions[walked], progress)
            for i, unc in zip(walked, walked_uncertain, strict=True):
                uncertain[i] = unc
        if bounded:
            counts = self._char_counts()
            has_callers, first_byte = self._rule_exits
            for i, span in bounded.items():
                rule = int(self.core.rtn.state_rule[positions[i]])
                exits = first_byte[rule] if has_callers[rule] else None
                accepted[i], uncertain[i] = counts.filtered(span, exits, MAX_LISTED_UNCERTAIN)

    def prepare(self) -> None:
        """Make now what the grammar's first positions with a caller need: its rules' calls and the
        bytes that may follow each (`_exit_flags`, `_shared_key`: 0.1-0.7 ms for a large schema,
        which fell on one of its later masks, the first after ``{"`` most often, rather than on its
        compile), and the vocabulary's `CharCounts` if the grammar has shared rules (strings), so
        that the first bounded string of the process does not pay for it in a mask."""
        if self._calls.with_callers.any():
            self._rule_exits  # noqa: B018  (a cached property: made here)
        if self.core.rtn.shared is not None and self.core.rtn.shared.any():
            self._char_counts()

    def _char_counts(self) -> CharCounts:
        """The vocabulary's `CharCounts`, its free string's classification made where missing (a
        classifier of its own over `free_string_rtn`, so that bounded strings need no free string
        in this grammar): once per process and vocabulary."""
        counts = CharCounts.of(self.trie, self.vocab_size)
        if counts.reference is None:
            rtn, content = free_string_rtn(self.core.rtn.trans.shape[1])
            free = PositionClassifier(ParserCore(rtn), self.trie, self.vocab_size, share=self.share)
            accepted, uncertain = free._walk_any(np.array([content], dtype=np.int64), None)
            counts.set_reference(accepted[0], uncertain[0])
        return counts

    def _walk_any(self, positions: np.ndarray,
                  progress: str | None) -> tuple[np.ndarray, list[Uncertain | None]]:
        return self._walk_native(positions, progress) if native.enabled() else self._walk(positions, progress)

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
        if rule not in self._key_parts:
            self._key_parts[rule] = self._rule_key_parts(rule)
        parts = self._key_parts[rule]
        if parts is None:
            return None
        signature, with_callers, follow = parts
        local = position - rtn.rule_bounds[rule]
        return (signature, local, with_callers) if follow is None else (signature, local, with_callers, follow)

    def _rule_key_parts(self, rule: int) -> tuple[bytes, bool, bytes | None] | None:
        signature = self._signatures[rule]
        if signature is None:
            return None
        follow = None if self.core.rtn.is_shared(rule) else self._follow[rule].tobytes()
        return signature, bool(self._calls.with_callers[rule]), follow

    def _followed(self, position: int, unc: Uncertain | None) -> Uncertain | None:
        """A shared rule's ``unc`` without the tokens whose residual begins with a byte no caller
        takes (`SharedPositions.followed`: made once per record and follow set)."""
        rule = int(self.core.rtn.state_rule[position])
        if unc is None or not self.core.rtn.is_shared(rule):
            return unc
        follow = self._follow[rule]

        def restrict() -> Uncertain | None:
            return unc.restricted(follow[self.trie.matrix[unc.residual_rows, unc.residual_starts]])

        return SharedPositions.of(self.trie).followed(unc, follow.tobytes(), restrict)

    def _walk(self, positions: np.ndarray, progress: str | None) -> tuple[np.ndarray, list[Uncertain | None]]:
        core, trie = self.core, self.trie
        accepted = np.zeros((len(positions), bitmask_width(self.vocab_size)), dtype=np.uint32)
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
        where a caller can continue them (`_exit_flags`)."""
        core, trie = self.core, self.trie
        walker = native.position_walker(trie, self.vocab_size)
        rules = core.rtn.state_rule[positions].tolist()
        accepted = np.empty((len(positions), bitmask_width(self.vocab_size)), dtype=np.uint32)
        uncertain: list[Uncertain | None] = [None] * len(positions)
        # (no bar at all without a label: making one, even disabled, took milliseconds)
        bar = None if progress is None else tqdm(total=len(positions), desc=progress, unit="pos", delay=1.0,
                                                 leave=False)
        for k, (position, rule) in enumerate(zip(positions.tolist(), rules, strict=True)):
            if bar is not None:
                bar.update(1)
            start = core.frame_state(position)
            if start == DEAD:
                accepted[k] = 0
                continue
            accepted[k], found = native.classify_position(walker, core, start, self._exit_flags(rule),
                                                          MAX_LISTED_UNCERTAIN, use_memo=True)
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

    def _exit_flags(self, rule: int) -> bytes | None:
        """`_rule_exits` of ``rule`` as `native.classify_position` takes them: the bytes a residual
        may begin with (256 bytes of 0/1), None where the frame has no caller. Made per rule when
        first walked (for every rule of a large schema at once, they were a tenth of a millisecond
        of its first key mask)."""
        flags = self._exit_flag_bytes
        if rule not in flags:
            has_callers, first_byte = self._rule_exits
            flags[rule] = first_byte[rule].astype(np.uint8).tobytes() if has_callers[rule] else None
        return flags[rule]

    @functools.cached_property
    def _rule_exits(self) -> tuple[np.ndarray, np.ndarray]:
        """Per rule: whether leaving its frame can continue in a caller (else the residual would
        follow the end of the input and is refused), and the bytes a residual may begin with: the
        follow bytes, or any byte for a shared rule (filtered after sharing: see `_followed`)."""
        rtn = self.core.rtn
        count = len(rtn.rule_names)
        has_callers = self._calls.with_callers
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
        words = np.zeros((self.count, bitmask_width(vocab_size)), dtype=np.uint32)
        owner = np.concatenate([found.ok_owner for found in self.sources])
        ids, owner = trie.expand_pairs(np.concatenate([found.ok_token for found in self.sources]), owner)
        ids = ids.astype(np.int64)
        np.bitwise_or.at(words, (owner, ids >> 5), np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))
        return words


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


def pack_rows(trie: TokenTrie, ok: np.ndarray, vocab_size: int) -> np.ndarray:
    """uint32 bitmask rows (token ids) from boolean rows over the trie's sorted tokens."""
    padded = np.concatenate([ok, np.zeros((ok.shape[0], 1), dtype=bool)], axis=1)
    allowed = np.take(padded, trie.row_of_id(bitmask_width(vocab_size) * 32), axis=1)
    return np.packbits(allowed, axis=1, bitorder="little").view(np.uint32)
