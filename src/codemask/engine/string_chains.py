"""Bounded JSON strings: every position of every bounded string from one walk of a free string.

A string of ``m`` to ``n`` characters (JSON Schema's ``minLength``/``maxLength``) is a chain of
automaton states, one per character read, and each is a position of its own whose first visit
walked the whole vocabulary: a few milliseconds per character with a 128k vocabulary, in every
string of every schema. Yet from the state with ``k`` characters read, a token is accepted, or
leaves the string's frame with a given residual, exactly when it does so inside a string of any
length (the free string's content, walked once per process and vocabulary) and the characters it
begins before the closing quote (`json_string_chars`) fit: at most ``n - k``, and at least
``m - k`` where it closes the string. So a bounded string's positions are the free string's
classification filtered by a per-token count.

A string too long for a chain counts its characters with calls of counting rules
(`codemask.grammar.counting`), whose blocks are such strings too: ``R`` characters exactly, then
the block's end. From a block's state a token is accepted when it begins at most ``R`` characters
and does not close the string, and it leaves the block when its content runs past ``R``
characters: its residual starts where the next character (or the closing quote) does
(`json_char_ends`). The string's own states, which call the blocks, are a count again: what
follows them is the content of ``m'`` to ``n'`` characters, whichever calls read them.

A position is taken for such a string only when the automaton from it is, character for
character, the free string's content, each state between two characters followed by the same
count whatever character was read, the counts of the calls it makes added, then the closing
quote or the block's end, then the end of the rule (`string_counts`): never a language the filter
was not derived for.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import ClassVar, NamedTuple, TypeVar

import numpy as np

from codemask.engine import native
from codemask.engine.automaton import RTN, RuleCalls, build_rtn
from codemask.engine.bitmask import bitmask_width
from codemask.engine.token_trie import TokenTrie
from codemask.engine.uncertain import Uncertain, uncertain_entries
from codemask.grammar.ir import RuleRef, literal, seq
from codemask.grammar.json_schema.strings import string_of_length

QUOTE, LETTER, BACKSLASH = ord('"'), ord("a"), ord("\\")
FREE_STRING = "string"
NEVER = np.iinfo(np.int32).max
UNKNOWN = -1  # a rule's length in `string_counts`: not a block of a known count
NO_BLOCK = "no block"  # a callee's part of `StringChains.rule_key` where it begins as no block does

# How many bounds a vocabulary keeps the token sets of (`CharCounts.fitting`), and how many bounded
# positions' classifications (`CharCounts.filtered`): the oldest go first.
KEPT_BOUNDS = 512


class Span(NamedTuple):
    """What a string's state lets a token do: begin at most ``high`` characters, and at least
    ``low`` if it closes the string (``closing``); or, in a block (not ``closing``, ``low`` equal
    to ``high``), end the block after exactly ``high`` characters. (A tuple: a counted string
    has one per character, and a tuple of numbers is no work for the garbage collector.)"""

    low: int
    high: int
    closing: bool


Counts = dict[int, tuple[int, int]]


def string_counts(rtn: RTN, start: int, closing: bool, lengths: np.ndarray) -> Counts | None:
    """Per state between two characters that the automaton reaches from ``start`` (in its rule):
    the fewest and the most characters of a JSON string's content that follow it before the
    closing quote (``closing``, the quote then ends the rule) or the rule's end (a block); None
    where the automaton from ``start`` is anything else, or the counts of a state are not an
    interval. ``lengths``: per rule, the characters of a block it may call (`UNKNOWN`: a call of
    it is anything else).

    Each state between characters is paired with the free string's (``content`` in
    `free_string_rtn`), the states inside a character with the free string's, byte for byte: both
    automata take the same bytes, and every character read from the state ends in one same next
    state. Its counts are then those of that state plus one, those of each call's return state
    plus the callee's length, and zero where it may end. The automaton's states within a
    character are paired with one free state each, whatever path reaches them, so its language is
    the count's.
    """
    rule = int(rtn.state_rule[start])
    lo, hi = rtn.rule_bounds[rule], rtn.rule_bounds[rule + 1]
    free, content = free_string_rtn(rtn.trans.shape[1])
    call_lo, callee, ret = rtn.call_table
    if native.enabled():
        out = native.string_counts(rtn.trans, rtn.accepting, call_lo, callee, ret, lengths, lo, hi, start,
                                   free.trans, free.accepting, content, closing)
        if out is None:
            return None
        between = np.flatnonzero(out[0::2] >= 0)
        return {lo + int(s): (int(out[2 * s]), int(out[2 * s + 1])) for s in between}
    return _StringCounts(rtn, lo, hi, free, content, closing, lengths).counts(start)


class _StringCounts:
    """`string_counts` without the extension (its C version's twin and the tests' oracle)."""

    def __init__(self, rtn: RTN, lo: int, hi: int, free: RTN, content: int, closing: bool,
                 lengths: np.ndarray) -> None:
        self.rtn, self.lo, self.hi, self.free, self.content = rtn, lo, hi, free, content
        self.closing, self.lengths = closing, lengths
        self.call_lo, self.callee, self.ret = rtn.call_table
        self.found: Counts = {}
        self.inside: dict[int, tuple[int, int]] = {}  # a state within a character: (free state, next state)
        self.open: set[int] = set()

    def counts(self, start: int) -> Counts | None:
        try:
            self._between(start)
        except _NotCounted:
            return None
        return self.found

    def _between(self, state: int) -> tuple[int, int]:
        found = self.found.get(state)
        if found is not None:
            return found
        if state in self.open or state in self.inside or not self.lo <= state < self.hi:
            raise _NotCounted  # a cycle (no bound), or not a state between characters
        self.open.add(state)
        ends, after = self._one_character(state)
        parts = [(0, 0)] if ends else []
        if after >= 0:
            low, high = self._between(after)
            parts.append((low + 1, high + 1))
        for call in range(int(self.call_lo[state]), int(self.call_lo[state + 1])):
            length = int(self.lengths[self.callee[call]])
            if length < 0:
                raise _NotCounted
            low, high = self._between(int(self.ret[call]))
            parts.append((low + length, high + length))
        self.open.discard(state)
        self.found[state] = _interval(parts)
        return self.found[state]

    def _one_character(self, state: int) -> tuple[bool, int]:
        """Whether ``state`` may end, and the state every character read from it ends in (-1: none)."""
        rtn, free = self.rtn, self.free
        ends = bool(rtn.accepting[state])
        if ends and self.closing:
            raise _NotCounted
        takes: set[bool] = set()
        after = [-1]
        todo: list[int] = []  # states within the character, each once (`_step`)
        character: list[int] = []  # those done
        for byte in range(rtn.trans.shape[1]):
            next_a, next_f = int(rtn.trans[state, byte]), int(free.trans[self.content, byte])
            if next_f >= 0 and free.accepting[next_f]:  # the closing quote
                if next_a >= 0:
                    if not (self.closing and self._is_end(next_a)):
                        raise _NotCounted
                    ends = True
                continue
            if next_f < 0:
                if next_a >= 0:
                    raise _NotCounted
                continue
            takes.add(next_a >= 0)
            if next_a >= 0:
                self._step(next_a, next_f, after, todo)
        if len(takes) > 1:
            raise _NotCounted
        while todo:
            inner = todo.pop()
            character.append(inner)
            f = self.inside[inner][0]
            if rtn.accepting[inner] or self.call_lo[inner + 1] > self.call_lo[inner]:
                raise _NotCounted
            for byte in range(rtn.trans.shape[1]):
                next_a, next_f = int(rtn.trans[inner, byte]), int(free.trans[f, byte])
                if (next_a < 0) != (next_f < 0) or (next_f >= 0 and free.accepting[next_f]):
                    raise _NotCounted
                if next_a >= 0:
                    self._step(next_a, next_f, after, todo)
        if True in takes and after[0] < 0:
            raise _NotCounted
        for inner in character:
            self.inside[inner] = (self.inside[inner][0], after[0])
        return ends, after[0]

    def _step(self, state: int, free_state: int, after: list[int], todo: list[int]) -> None:
        """Pair ``state`` with ``free_state``: the next state between characters, or a state within one."""
        if not self.lo <= state < self.hi:
            raise _NotCounted
        if free_state == self.content:
            _same(after, state)
            return
        if state in self.found or state in self.open:
            raise _NotCounted
        known = self.inside.get(state)
        if known is None:
            self.inside[state] = (free_state, -1)
            todo.append(state)
        elif known[0] != free_state:
            raise _NotCounted
        elif known[1] >= 0:
            _same(after, known[1])

    def _is_end(self, state: int) -> bool:
        """Whether ``state`` is the rule's end and nothing else."""
        rtn = self.rtn
        return (self.lo <= state < self.hi and bool(rtn.accepting[state]) and not (rtn.trans[state] >= 0).any()
                and self.call_lo[state + 1] == self.call_lo[state])


class _NotCounted(Exception):
    """The automaton is not a counted string's content from where `string_counts` began."""


def _same(after: list[int], state: int) -> None:
    if after[0] >= 0 and after[0] != state:
        raise _NotCounted
    after[0] = state


def _interval(parts: list[tuple[int, int]]) -> tuple[int, int]:
    """The union of the intervals ``parts``, which must be one interval."""
    if not parts:
        raise _NotCounted
    parts.sort()
    low, high = parts[0]
    for part_low, part_high in parts[1:]:
        if part_low > high + 1:
            raise _NotCounted
        high = max(high, part_high)
    return low, high


class StringChains:
    """The bounded strings and blocks of one grammar, found rule by rule as their positions are
    classified.

    What is found in a rule is kept for the process too, by its automaton's compile key
    (`DFA.key`) and its callees' (`rule_key`): the same strings and counting blocks recur in every
    schema.
    """

    _known: ClassVar[OrderedDict[object, tuple[tuple[int, Span], ...]]] = OrderedDict()
    _lock: ClassVar[threading.Lock] = threading.Lock()
    KNOWN = 1024  # rules (a counted string has a span per character of its own)

    def __init__(self, rtn: RTN, calls: RuleCalls) -> None:
        """``calls``: ``rtn``'s call graph (`RTN.rule_calls`; the limit it was made with does not matter)."""
        self.rtn = rtn
        self._calls = calls
        self._spans: dict[int, Span] = {}
        self._done: set[int] = set()
        self._lengths = np.full(len(rtn.rule_names), UNKNOWN, dtype=np.int32)
        self._keys: dict[int, object] = {}
        self._blocks: dict[int, bool] = {}

    def span(self, position: int) -> Span | None:
        """The `Span` of ``position`` where it is a state of a bounded string or block, else None."""
        if self._may_begin(position):
            self._find(int(self.rtn.state_rule[position]))
        return self._spans.get(position)

    def _find(self, rule: int) -> None:
        """Set the spans of ``rule``'s states (and the length of the block it is, if it is one),
        those of the rules it calls first."""
        if rule in self._done:
            return
        self._done.add(rule)  # (first: a recursive call is of no block)
        for called in self._callees(rule):
            if self._may_be_block(called):
                self._find(called)
        key = self.rule_key(rule)
        with self._lock:
            found = self._known.get(key) if key is not None else None
            if found is not None:
                self._known.move_to_end(key)
        if found is None:
            found = tuple((state - self.rtn.rule_bounds[rule], span) for state, span in self._counted(rule).items())
            if key is not None:
                with self._lock:
                    self._known[key] = found
                    if len(self._known) > self.KNOWN:
                        self._known.popitem(last=False)
        lo = self.rtn.rule_bounds[rule]
        self._spans.update((lo + state, span) for state, span in found)
        start = self._spans.get(int(self.rtn.rule_start[rule]))
        if start is not None and not start.closing:
            self._lengths[rule] = start.high

    def _counted(self, rule: int) -> dict[int, Span]:
        """The spans of ``rule``'s states: a string's from the state after its opening quote, or a
        block's from its start (none where it is neither)."""
        start = int(self.rtn.rule_start[rule])
        after_quote = int(self.rtn.trans[start, QUOTE])
        closing = after_quote >= 0
        counts = string_counts(self.rtn, after_quote if closing else start, closing, self._lengths)
        return {state: Span(low, high, closing) for state, (low, high) in (counts or {}).items()
                if closing or low == high}

    def rule_key(self, rule: int) -> object | None:
        """What ``rule``'s spans are found from: its automaton's compile key (which holds the indices
        of the rules it calls), and per callee its own key if it may be a block, else that it is
        none (a call of it ends any count). None: not known, or recursive."""
        if rule not in self._keys:
            self._keys[rule] = None  # (while its callees' are made: a recursive rule has none)
            own = self.rtn.rule_keys[rule] if self.rtn.rule_keys is not None else None
            callees = tuple(self.rule_key(called) if self._may_be_block(called) else NO_BLOCK
                            for called in self._callees(rule))
            if own is not None and None not in callees:
                self._keys[rule] = (own, callees)
        return self._keys[rule]

    def _callees(self, rule: int) -> list[int]:
        """The rules ``rule`` calls, ascending."""
        return self._calls.callees[self._calls.callee_lo[rule]:self._calls.callee_lo[rule + 1]].tolist()

    def _may_be_block(self, rule: int) -> bool:
        """Whether ``rule`` begins as a block does: with a string's content, or with calls of such
        rules only (a cheap test, so that a rule calling a schema's values does not look at them all)."""
        if rule not in self._blocks:
            self._blocks[rule] = False  # (while its callees are looked at: a recursive rule is none)
            start = int(self.rtn.rule_start[rule])
            call_lo, callee, _ret = self.rtn.call_table
            called = callee[call_lo[start]:call_lo[start + 1]].tolist()
            self._blocks[rule] = self._may_begin(start) or (
                bool(called) and not bool((self.rtn.trans[start] >= 0).any()) and all(map(self._may_be_block, called)))
        return self._blocks[rule]

    def _may_begin(self, position: int) -> bool:
        """Whether ``position`` takes a letter, an escape and a two-byte character, as any string's
        content does (a cheap test before `string_counts`)."""
        row = self.rtn.trans[position]
        return len(row) == 256 and bool(row[LETTER] >= 0 and row[BACKSLASH] >= 0 and row[0xC3] >= 0)


@functools.cache
def free_string_rtn(alphabet: int) -> tuple[RTN, int]:
    """A grammar whose one string, of any length, is called (so that its frame has a caller and its
    uncertain tokens are kept), and the position of that string's content."""
    rtn = build_rtn({"root": seq(RuleRef(FREE_STRING), literal("\n")), FREE_STRING: string_of_length(0, None)},
                    "root", alphabet, shared=frozenset({FREE_STRING}))
    rule = rtn.rule_names.index(FREE_STRING)
    return rtn, int(rtn.trans[rtn.rule_start[rule], QUOTE])


K = TypeVar("K")
V = TypeVar("V")


def _kept(kept: dict[K, V], key: K, make: Callable[[], V]) -> V:
    """``kept[key]``, made by ``make()`` where missing (the oldest item dropped past `KEPT_BOUNDS`)."""
    found = kept.get(key)
    if found is None:
        found = make()
        if len(kept) >= KEPT_BOUNDS:
            kept.pop(next(iter(kept)))
        kept[key] = found
    return found


class CharCounts:
    """Per token of one vocabulary, `json_string_chars`, and the token sets those counts bound.

    ``reference`` is the classification (accepted row, uncertain tokens, not filtered by what may
    follow) of the free string's content, which the position classifier sets once (`set_reference`).
    """

    _by_trie: ClassVar[dict[int, tuple[TokenTrie, int, CharCounts]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, trie: TokenTrie, vocab_size: int) -> None:
        self.trie = trie
        self._row_of_id = trie.row_of_id(bitmask_width(vocab_size) * 32)
        self._by_row = json_string_chars(trie)
        by_id = np.append(self._by_row, NEVER)[self._row_of_id]  # (no row: never fits)
        self.chars, self.closes = by_id >> 1, (by_id & 1).astype(bool)
        self.reference: tuple[np.ndarray, Uncertain | None] | None = None
        self._fitting: dict[tuple[int, int], np.ndarray] = {}
        self._filtered: dict[tuple[Span, bytes | None, int], tuple[np.ndarray, Uncertain | None]] = {}
        self._rows: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32))
        self._counts, self._at_most = _at_most_rows(self.chars)
        self._open = np.packbits(~self.closes, bitorder="little").view(np.uint32)

    @classmethod
    def of(cls, trie: TokenTrie, vocab_size: int) -> CharCounts:
        with cls._lock:
            found = cls._by_trie.get(id(trie))
            if found is None or found[0] is not trie or found[1] != vocab_size:
                found = cls._by_trie[id(trie)] = (trie, vocab_size, cls(trie, vocab_size))
            return found[2]

    def _fits(self, ids: np.ndarray | slice, low: int, high: int) -> np.ndarray:
        chars = self.chars[ids]
        return (chars <= high) & ((chars >= low) | ~self.closes[ids])

    def fitting(self, low: int, high: int) -> np.ndarray:
        """The tokens that begin at most ``high`` characters, and at least ``low`` if they close the
        string, as a uint32 bitmask row: ``_fits`` of every token, from the rows of the tokens that
        begin at most so many (testing every token took 0.1 ms per new bound, in a mask)."""
        return _kept(self._fitting, (low, high),
                     lambda: self._at_most_row(high) & (~self._at_most_row(low - 1) | self._open))

    def _at_most_row(self, chars: int) -> np.ndarray:
        """The tokens that begin at most ``chars`` characters (the never-fitting ones count
        ``NEVER >> 1``), as a uint32 bitmask row."""
        k = int(np.searchsorted(self._counts, chars, side="right")) - 1
        return self._at_most[k] if k >= 0 else np.zeros(self._at_most.shape[1], dtype=np.uint32)

    def filtered(self, span: Span, exits: np.ndarray | None, listed: int) -> tuple[np.ndarray, Uncertain | None]:
        """A chain position's classification from ``reference``. ``exits``: the bytes a residual may
        begin with (None: the frame has no caller, so none is kept); ``listed``: the most uncertain
        tokens a position lists (`Uncertain.unlisted` past it). Kept per span, exits and limit until
        the reference changes (filtering the free string's thousands of uncertain tokens again was
        most of the first mask of a bounded string in every grammar): the row is read-only."""
        assert self.reference is not None, "the free string's classification is set first"
        key = (span, None if exits is None else exits.tobytes(), listed)
        return _kept(self._filtered, key, lambda: self._filter(span, exits, listed))

    def _filter(self, span: Span, exits: np.ndarray | None, listed: int) -> tuple[np.ndarray, Uncertain | None]:
        assert self.reference is not None
        accepted, uncertain = self.reference
        if exits is None:
            uncertain = None
        elif not span.closing:
            uncertain = self._crossing(span.high, exits, listed)
        elif uncertain is not None:
            uncertain = uncertain.restricted_to_tokens(self._fits(uncertain.token_ids, span.low, span.high))
            if uncertain is not None:
                first = self.trie.matrix[uncertain.residual_rows, uncertain.residual_starts]
                uncertain = uncertain.restricted(exits[first])
        row = accepted & self.fitting(NEVER if not span.closing else span.low, span.high)
        row.setflags(write=False)
        return row, uncertain

    def _crossing(self, chars: int, exits: np.ndarray, listed: int) -> Uncertain | None:
        """The tokens whose content runs past the end of a block ``chars`` characters away, each with
        the rest of it as its residual (those the free string accepts or leaves: any other is not a
        string's content, and no caller takes its residual). Unlisted where the free string's own
        uncertain tokens are (they are then not known here either)."""
        if self.reference is not None and self.reference[1] is not None and self.reference[1].direct:
            return Uncertain.unlisted()
        rows, keys = self._rows
        # past `chars` characters, or closing after them (a search for a typed key: a Python int
        # made numpy copy the whole array)
        rows = rows[keys.searchsorted(keys.dtype.type(2 * chars + 1)):]
        ends = json_char_ends(self.trie, rows, chars)
        keep = exits[self.trie.matrix[rows, ends]]
        rows, ends = rows[keep], ends[keep]
        if len(rows) > listed:
            return Uncertain.unlisted()
        return uncertain_entries(self.trie, np.zeros(len(rows), dtype=np.int64), rows, ends.astype(np.int64), 1)[0]

    def set_reference(self, accepted: np.ndarray, uncertain: Uncertain | None) -> None:
        """Set ``reference``, and the trie rows of its tokens by ``2 * chars + closes`` (a block's
        crossing tokens are those past a key: `_crossing`)."""
        self._filtered.clear()
        in_reference = np.zeros(self.trie.num_tokens + 1, dtype=bool)  # (a mark per row: np.unique took 35 ms)
        in_reference[self._row_of_id[np.flatnonzero(np.unpackbits(accepted.view(np.uint8), bitorder="little"))]] = True
        if uncertain is not None:
            in_reference[self._row_of_id[uncertain.token_ids]] = True
        rows = np.flatnonzero(in_reference[:-1])
        order = np.argsort(self._by_row[rows], kind="stable")
        self._rows = (rows[order], self._by_row[rows][order])
        self.reference = (accepted, uncertain)


def _at_most_rows(chars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``chars`` (ascending) and, per value, the ids whose count is at most
    it as a uint32 bitmask row (a hundred rows for a 128k vocabulary: its tokens are short)."""
    order = np.argsort(chars, kind="stable")
    counts, starts = np.unique(chars[order], return_index=True)
    taken = np.zeros(len(chars), dtype=bool)
    rows = np.empty((len(counts), -(-len(chars) // 32)), dtype=np.uint32)
    for k, (lo, hi) in enumerate(zip(starts.tolist(), [*starts[1:].tolist(), len(chars)], strict=True)):
        taken[order[lo:hi]] = True
        rows[k] = np.packbits(taken, bitorder="little").view(np.uint32)
    return counts, rows


def json_string_chars(trie: TokenTrie) -> np.ndarray:
    """Per trie row: twice the characters of a JSON string's content its token begins before its
    first unescaped quote (all of it where there is none), plus one where it has that quote. An
    escape or a UTF-8 character counts one whether complete or not, a surrogate pair of ``\\u``
    escapes one: what ``maxLength`` counts."""
    if native.enabled():
        return native.json_string_chars(trie.matrix, trie.lengths)
    return np.array([_json_chars(bytes(trie.matrix[row, :length]))[0]
                     for row, length in enumerate(trie.lengths.tolist())], dtype=np.int32)


def json_char_ends(trie: TokenTrie, rows: np.ndarray, chars: int) -> np.ndarray:
    """Per trie row of ``rows``: the byte where its token's content goes on past ``chars``
    characters (the next character or the closing quote begins there), -1 where it does not."""
    if native.enabled():
        return native.json_char_ends(trie.matrix, trie.lengths, rows, chars)
    return np.array([_json_chars(bytes(trie.matrix[row, :trie.lengths[row]]), chars)[1] for row in rows.tolist()],
                    dtype=np.int32)


def _json_chars(token: bytes, stop: int = -1) -> tuple[int, int]:
    """`json_string_chars` of one token, and the byte where its content goes on past ``stop``
    characters (or -1): the C version's twin."""
    count, after_high, i, end = 0, False, 0, -1
    while i < len(token) and token[i] != QUOTE:
        if token[i] != BACKSLASH:
            if token[i] & 0xC0 != 0x80:
                end = i if count == stop else end
                count += 1
            after_high, i = False, i + 1
            continue
        unicode = token[i + 1:i + 2] == b"u"
        low_half = after_high and unicode
        if not low_half:
            end = i if count == stop else end
            count += 1
        stop_at = i + (6 if unicode else 2)
        after_high = (not low_half and unicode and stop_at <= len(token) and token[i + 2:i + 3].lower() == b"d"
                      and token[i + 3:i + 4].lower() in (b"8", b"9", b"a", b"b"))
        i = min(stop_at, len(token))
    if count == stop and i < len(token):
        end = i
    return 2 * count + (i < len(token)), end
