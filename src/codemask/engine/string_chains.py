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

A rule is taken for such a string only when its automaton is the minimal DFA of
`string_of_length` itself (a minimal DFA's numbering depends on its language alone), so the
filter never applies to a language it was not derived for.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from codemask.engine import native
from codemask.engine.automaton import RTN, build_rtn, compile_expr
from codemask.engine.bitmask import bitmask_width
from codemask.engine.token_trie import TokenTrie
from codemask.engine.uncertain import Uncertain
from codemask.grammar.ir import RuleRef, literal, seq
from codemask.grammar.json_schema.strings import string_of_length

QUOTE, LETTER = ord('"'), ord("a")
FREE_STRING = "string"

# (lowest, highest) character counts whose token sets a vocabulary keeps (`CharCounts.fitting`)
KEPT_BOUNDS = 512


@dataclass
class StringChain:
    """A rule that is exactly a JSON string of ``min_length`` to ``max_length`` characters."""

    min_length: int
    max_length: int
    heads: tuple[int, ...]  # the global state after the opening quote and k characters, k = 0 .. max_length

    @functools.cached_property
    def _index(self) -> dict[int, int]:
        return {head: k for k, head in enumerate(self.heads)}

    def bounds(self, state: int) -> tuple[int, int] | None:
        """For a state of the chain: the least characters a token that closes the string must begin
        from there, and the most any token may; None for another state."""
        k = self._index.get(state)
        return None if k is None else (max(0, self.min_length - k), self.max_length - k)


def string_chain(rtn: RTN, rule: int) -> StringChain | None:
    """``rule`` as a bounded JSON string, or None if its automaton is anything else.

    The bounds are read off the automaton (the characters it takes after the opening quote before
    only the quote is left, and the first count the quote may close), then the whole automaton is
    compared with `string_of_length`'s for those bounds.
    """
    lo = int(np.searchsorted(rtn.state_rule, rule))
    hi = int(np.searchsorted(rtn.state_rule, rule, side="right"))
    call_lo = rtn.call_table[0]
    if call_lo[hi] != call_lo[lo]:
        return None
    state = int(rtn.trans[rtn.rule_start[rule], QUOTE])
    heads: list[int] = []
    while state >= 0 and len(heads) <= hi - lo:
        heads.append(state)
        state = int(rtn.trans[state, LETTER])
    if len(heads) < 2 or state >= 0:
        return None
    closing = [k for k, head in enumerate(heads) if rtn.trans[head, QUOTE] >= 0]
    if not closing:
        return None
    low, high = closing[0], len(heads) - 1
    dfa = compile_expr(string_of_length(low, high), {}, rtn.trans.shape[1])
    trans = rtn.trans[lo:hi]
    if (len(dfa.accepting) != hi - lo or dfa.start != rtn.rule_start[rule] - lo
            or not np.array_equal(np.where(trans >= 0, trans - lo, -1), dfa.trans)
            or not np.array_equal(rtn.accepting[lo:hi], dfa.accepting)):
        return None
    return StringChain(low, high, tuple(heads))


class StringChains:
    """The bounded strings of one grammar, found rule by rule as their positions are classified."""

    def __init__(self, rtn: RTN) -> None:
        self.rtn = rtn
        self._chains: dict[int, StringChain | None] = {}

    def bounds(self, position: int) -> tuple[int, int] | None:
        """`StringChain.bounds` of ``position`` where it is a state of a bounded string's chain."""
        rule = int(self.rtn.state_rule[position])
        if rule not in self._chains:  # (strings are shared rules: the others are not looked at)
            self._chains[rule] = string_chain(self.rtn, rule) if self.rtn.is_shared(rule) else None
        chain = self._chains[rule]
        return None if chain is None else chain.bounds(position)


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
    follow) of the free string's content, which the position classifier sets once.
    """

    _by_trie: ClassVar[dict[int, tuple[TokenTrie, int, CharCounts]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, trie: TokenTrie, vocab_size: int) -> None:
        words = bitmask_width(vocab_size)
        by_row = np.append(json_string_chars(trie), np.iinfo(np.int32).max)  # (no row: never fits)
        by_id = by_row[trie.row_of_id(words * 32)]
        self.chars, self.closes = by_id >> 1, (by_id & 1).astype(bool)
        self.reference: tuple[np.ndarray, Uncertain | None] | None = None
        self._fitting: dict[tuple[int, int], np.ndarray] = {}

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

    def filtered(self, low: int, high: int, with_callers: bool) -> tuple[np.ndarray, Uncertain | None]:
        """A bounded string position's classification (`StringChain.bounds`: ``low``, ``high``) from
        ``reference``; no uncertain tokens where the string's frame has no caller."""
        assert self.reference is not None, "the free string's classification is set first"
        accepted, uncertain = self.reference
        if uncertain is not None:
            uncertain = uncertain.restricted_to_tokens(self._fits(uncertain.token_ids, low, high)) if with_callers \
                else None
        return accepted & self.fitting(low, high), uncertain


def json_string_chars(trie: TokenTrie) -> np.ndarray:
    """Per trie row: twice the characters of a JSON string's content its token begins before its
    first unescaped quote (all of it where there is none), plus one where it has that quote. An
    escape or a UTF-8 character counts one whether complete or not, a surrogate pair of ``\\u``
    escapes one: what ``maxLength`` counts."""
    if native.enabled():
        return native.json_string_chars(trie.matrix, trie.lengths)
    return np.array([_json_chars(bytes(trie.matrix[row, :length]))
                     for row, length in enumerate(trie.lengths.tolist())], dtype=np.int32)


def _json_chars(token: bytes) -> int:
    """`json_string_chars` of one token (the C version's twin)."""
    count, after_high, i = 0, False, 0
    while i < len(token) and token[i] != QUOTE:
        if token[i] != ord("\\"):
            count += token[i] & 0xC0 != 0x80
            after_high, i = False, i + 1
            continue
        unicode = token[i + 1:i + 2] == b"u"
        low_half = after_high and unicode
        count += not low_half
        end = i + (6 if unicode else 2)
        after_high = (not low_half and unicode and end <= len(token) and token[i + 2:i + 3].lower() == b"d"
                      and token[i + 3:i + 4].lower() in (b"8", b"9", b"a", b"b"))
        i = min(end, len(token))
    return 2 * count + (i < len(token))
