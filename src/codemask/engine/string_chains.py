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

A string too long for a chain (`codemask.grammar.counting`) ends in such a chain, and its counting
rules' blocks are chains too: ``R`` characters exactly, then the block's end. From there a token
is accepted when it begins at most ``R`` characters and does not close the string, and it leaves
the block when its content runs past ``R`` characters: its residual starts where the next
character (or the closing quote) does (`json_char_ends`).

A position is taken for such a chain only when the automaton from it is, state for state, the
free string's content with a count of its characters, then the closing quote or the block's end,
then the end of the rule (`bounded_chain`): never a language the filter was not derived for.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from codemask.engine import native
from codemask.engine.automaton import RTN, build_rtn
from codemask.engine.bitmask import bitmask_width
from codemask.engine.token_trie import TokenTrie
from codemask.engine.uncertain import Uncertain, uncertain_entries
from codemask.grammar.ir import RuleRef, literal, seq
from codemask.grammar.json_schema.strings import string_of_length

QUOTE, LETTER, BACKSLASH = ord('"'), ord("a"), ord("\\")
FREE_STRING = "string"
NEVER = np.iinfo(np.int32).max

# (lowest, highest) character counts whose token sets a vocabulary keeps (`CharCounts.fitting`)
KEPT_BOUNDS = 512


@dataclass(frozen=True)
class Span:
    """What a chain's state lets a token do: begin at most ``high`` characters, and at least ``low``
    if it closes the string (``closing``); or, in a block (not ``closing``), end the block after
    exactly ``high`` characters."""

    low: int
    high: int
    closing: bool


@dataclass
class StringChain:
    """A string's content of ``min_length`` to ``max_length`` characters from ``heads[0]``, then its
    closing quote, or exactly ``max_length`` characters (a block: not ``closing``)."""

    min_length: int
    max_length: int
    closing: bool
    heads: tuple[int, ...]  # the state after k characters, k = 0 .. max_length

    def spans(self) -> dict[int, Span]:
        """Per state of the chain, its `Span`."""
        return {head: Span(max(0, self.min_length - k), self.max_length - k, self.closing)
                for k, head in enumerate(self.heads)}


def string_chain(rtn: RTN, state: int, has_calls: np.ndarray) -> StringChain | None:
    """The chain of a string's content from ``state`` to its closing quote (or the end of a block)
    and the end of its rule, or None if the automaton from ``state`` is anything else
    (``has_calls``: per state, whether it calls a rule).

    The bounds are read off the automaton (the characters it takes until only the quote or the end
    is left, and the first count the quote may close), then the automaton from ``state`` is compared
    with the free string's content counted up to those bounds (`bounded_chain`).
    """
    rule = int(rtn.state_rule[state])
    lo, hi = (int(x) for x in np.searchsorted(rtn.state_rule, [rule, rule + 1]))
    heads: list[int] = []
    while state >= 0 and state not in heads[-1:] and len(heads) <= hi - lo:
        heads.append(state)
        state = int(rtn.trans[state, LETTER])
    if len(heads) < 2 or state >= 0:
        return None
    closing = [k for k, head in enumerate(heads) if rtn.trans[head, QUOTE] >= 0]
    high = len(heads) - 1
    chain = StringChain(closing[0] if closing else high, high, bool(closing), tuple(heads))
    free, content = free_string_rtn(rtn.trans.shape[1])
    if not bounded_chain(rtn, has_calls, lo, hi, heads[0], free, content, chain):
        return None
    return chain


def bounded_chain(rtn: RTN, has_calls: np.ndarray, lo: int, hi: int, start: int, free: RTN, content: int,
                  chain: StringChain) -> bool:
    """Whether the automaton from ``start`` (a state of the rule of states ``lo``..``hi``) is the free
    string's content (``content`` in ``free``) as ``chain`` bounds it, then its closing quote or its
    block's end, then the end of the rule: the two walked in step, state for state and byte for
    byte, the free string's states paired with a count of the characters read (a character may
    begin only below the most, the quote close only from the least). Both automata are minimal, so
    a one-to-one match is equality of their languages."""
    low, high, closing = chain.min_length, chain.max_length, chain.closing
    if native.enabled():
        return native.bounded_chain(rtn.trans, rtn.accepting, has_calls, lo, hi, start, free.trans, free.accepting,
                                    content, low, high, closing)
    span = high + 1
    pair_of, state_of = {start: content * span}, {content * span: start}
    todo = [start]
    while todo:
        a = todo.pop()
        f, k = divmod(pair_of[a], span)
        ends = bool(free.accepting[f]) if closing else f == content and k == high
        if has_calls[a] or bool(rtn.accepting[a]) != ends:
            return False
        for byte in range(rtn.trans.shape[1]):
            next_a, next_f = int(rtn.trans[a, byte]), int(free.trans[f, byte])
            next_b = -1
            if next_f >= 0 and free.accepting[next_f]:
                next_b = next_f * span if closing and k >= low else -1
            elif next_f >= 0 and not (f == content and k >= high):
                next_b = content * span + k + 1 if next_f == content else next_f * span + k
            if (next_a < 0) != (next_b < 0) or (next_a >= 0 and not lo <= next_a < hi):
                return False
            if next_a < 0:
                continue
            if next_a not in pair_of and next_b not in state_of:
                pair_of[next_a], state_of[next_b] = next_b, next_a
                todo.append(next_a)
            elif pair_of.get(next_a) != next_b or state_of.get(next_b) != next_a:
                return False
    return True


class StringChains:
    """The bounded strings and blocks of one grammar, found as their positions are classified.

    What is found from a state is kept for the process too, by its rule's automaton (`DFA.key`) and
    its place in it: the same strings and counting blocks recur in every schema.
    """

    _known: ClassVar[OrderedDict[tuple[object, int], tuple[tuple[int, Span], ...] | None]] = OrderedDict()
    _lock: ClassVar[threading.Lock] = threading.Lock()
    KNOWN = 8192

    def __init__(self, rtn: RTN) -> None:
        self.rtn = rtn
        self._spans: dict[int, Span | None] = {}

    @functools.cached_property
    def _has_calls(self) -> np.ndarray:
        return np.diff(self.rtn.call_table[0]) > 0

    def span(self, position: int) -> Span | None:
        """The `Span` of ``position`` where it is a state of a string's chain, else None."""
        if position not in self._spans:
            rule = int(self.rtn.state_rule[position])
            lo = int(np.searchsorted(self.rtn.state_rule, rule))
            key = self.rtn.rule_keys[rule] if self.rtn.rule_keys is not None else None
            known = (key, position - lo) if key is not None else None
            with self._lock:
                found = self._known.get(known, ()) if known is not None else ()  # (): not looked at yet
            if found == ():
                chain = string_chain(self.rtn, position, self._has_calls) if self._may_begin(position) else None
                found = None if chain is None else tuple((head - lo, span) for head, span in chain.spans().items())
                if known is not None:
                    with self._lock:
                        self._known[known] = found
                        if len(self._known) > self.KNOWN:
                            self._known.popitem(last=False)
            self._spans[position] = None
            self._spans.update((lo + head, span) for head, span in found or ())
        return self._spans[position]

    def _may_begin(self, position: int) -> bool:
        """Whether ``position`` takes a letter, an escape and a two-byte character, as any string's
        content does (a cheap test before `string_chain`)."""
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
        self._rows: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32))

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
        string, as a uint32 bitmask row."""
        row = self._fitting.get((low, high))
        if row is None:
            row = np.packbits(self._fits(slice(None), low, high), bitorder="little").view(np.uint32)
            if len(self._fitting) >= KEPT_BOUNDS:
                self._fitting.pop(next(iter(self._fitting)))
            self._fitting[(low, high)] = row
        return row

    def filtered(self, span: Span, exits: np.ndarray | None, listed: int) -> tuple[np.ndarray, Uncertain | None]:
        """A chain position's classification from ``reference``. ``exits``: the bytes a residual may
        begin with (None: the frame has no caller, so none is kept); ``listed``: the most uncertain
        tokens a position lists (`Uncertain.unlisted` past it)."""
        assert self.reference is not None, "the free string's classification is set first"
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
        return accepted & self.fitting(NEVER if not span.closing else span.low, span.high), uncertain

    def _crossing(self, chars: int, exits: np.ndarray, listed: int) -> Uncertain | None:
        """The tokens whose content runs past the end of a block ``chars`` characters away, each with
        the rest of it as its residual (those the free string accepts or leaves: any other is not a
        string's content, and no caller takes its residual). Unlisted where the free string's own
        uncertain tokens are (they are then not known here either)."""
        if self.reference is not None and self.reference[1] is not None and self.reference[1].direct:
            return Uncertain.unlisted()
        rows, keys = self._rows
        rows = rows[np.searchsorted(keys, 2 * chars + 1):]  # (past `chars` characters, or closing after them)
        ends = json_char_ends(self.trie, rows, chars)
        keep = exits[self.trie.matrix[rows, ends]]
        rows, ends = rows[keep], ends[keep]
        if len(rows) > listed:
            return Uncertain.unlisted()
        return uncertain_entries(self.trie, np.zeros(len(rows), dtype=np.int64), rows, ends.astype(np.int64), 1)[0]

    def set_reference(self, accepted: np.ndarray, uncertain: Uncertain | None) -> None:
        """Set ``reference``, and the trie rows of its tokens by ``2 * chars + closes`` (a block's
        crossing tokens are those past a key: `_crossing`)."""
        in_reference = np.zeros(self.trie.num_tokens + 1, dtype=bool)  # (a mark per row: np.unique took 35 ms)
        in_reference[self._row_of_id[np.flatnonzero(np.unpackbits(accepted.view(np.uint8), bitorder="little"))]] = True
        if uncertain is not None:
            in_reference[self._row_of_id[uncertain.token_ids]] = True
        rows = np.flatnonzero(in_reference[:-1])
        order = np.argsort(self._by_row[rows], kind="stable")
        self._rows = (rows[order], self._by_row[rows][order])
        self.reference = (accepted, uncertain)


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
