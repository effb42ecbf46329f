"""The regex front-end: Python ``re`` patterns to grammar expressions.

A pattern becomes an expression that matches exactly the strings ``re.fullmatch`` accepts
(``regex_to_expr(p)``), or, with ``search=True``, the strings in which ``re.search`` finds a match
(JSON Schema ``pattern`` is search semantics).

How it is built, and why:

- **Validation by ``re`` itself.** Every pattern is first compiled with :func:`re.compile`, so a
  pattern is accepted exactly when Python accepts it, and a syntax error carries Python's own
  message and position (as a :class:`GrammarSyntaxError`). The inline flags that apply to the
  whole pattern (``(?i)``, ``(?x)``, …) are read back from the compiled pattern.
- **Our own parser, not ``re._parser``.** ``sre_parse`` gives no positions for its nodes (we need
  them to point at unsupported constructs), folds common prefixes of alternatives, and moved and
  changed between 3.10 and 3.11 (``re._parser``, possessive and atomic nodes). The parser here
  follows its reading rules to the letter (escapes, octal versus back-references, ``{`` that is
  not a quantifier, verbose whitespace and comments, ``]`` first in a class, scoped flags) and
  only has to interpret patterns that Python has already accepted.
- **Character semantics from ``re`` over all code points.** What a single-character item matches
  (``\\d``, ``\\w``, ``\\s`` with their Unicode or ASCII meanings, and every literal or class under
  ``IGNORECASE``, with Python's simple case folding and its special cases like ``ſ``/``K``/``ı``) is
  computed by running ``re`` itself over a string of every code point, once per item and cached.
  So it cannot drift from Python's behaviour, whatever the version.
- **Anchors** are zero-width assertions about the characters around a position. Under fullmatch,
  ``^``, ``$``, ``\\A`` and ``\\Z`` at the edges hold trivially. Everywhere else an anchor is kept
  only if its truth is decided by what surrounds it: the string edge, or neighbouring items whose
  characters are all of one kind (``\\b`` between ``\\w+`` and ``\\s`` always holds; ``^`` after a
  ``\\n`` under ``MULTILINE`` always holds). Under search semantics an anchor at an unanchored end
  shapes the free prefix or suffix (``$`` allows one final newline, as in Python). Anchors whose
  truth would depend on the input raise :class:`UnsupportedRegexError`.
- **Not expressible exactly**, and refused with :class:`UnsupportedRegexError` naming the construct
  and its column: lookahead and lookbehind, back-references, conditionals, and possessive
  quantifiers or atomic groups except where they cannot change the result (at the end of a search
  pattern, or on a single character class that what follows cannot start with). Lazy quantifiers
  match the same strings as greedy ones under fullmatch and search, so they are simply accepted.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias, Union

import numpy as np

from codemask.errors import GrammarError, GrammarSyntaxError
from codemask.grammar.ir import (
    EMPTY,
    MAX_CODE_POINT,
    MAX_NESTING,
    NOTHING,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    char_class,
    choice,
    complement_ranges,
    literal,
    normalize_ranges,
    seq,
)

Ranges: TypeAlias = tuple[tuple[int, int], ...]

_SOURCE = "<regex>"
_SURROGATES: Ranges = ((0xD800, 0xDFFF),)
_WHITESPACE = frozenset(" \t\n\r\v\f")
_DIGITS = frozenset("0123456789")
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")
# Plain ints: RegexFlag arithmetic goes through enum machinery, and the parser does a lot of it.
_I, _L, _M, _S, _X, _A, _U = (int(f) for f in (re.IGNORECASE, re.LOCALE, re.MULTILINE, re.DOTALL, re.VERBOSE,
                                                re.ASCII, re.UNICODE))
_FLAG_LETTERS = {"i": _I, "L": _L, "m": _M, "s": _S, "x": _X, "a": _A, "u": _U}
_TYPE_FLAGS = _A | _L | _U
_SIMPLE_ESCAPES = {"a": 0x07, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B, "\\": 0x5C}
_HEX_WIDTH = {"x": 2, "u": 4, "U": 8}


class UnsupportedRegexError(GrammarSyntaxError):
    """A valid Python regex that uses a construct no grammar can match exactly (lookaround, …)."""

    def __init__(self, message: str, pattern: str, offset: int) -> None:
        super().__init__(message, pattern, offset, _SOURCE)


def regex_to_expr(pattern: str, flags: int = 0, *, search: bool = False) -> Expr:
    """The expression matching what ``re.fullmatch(pattern, s, flags)`` accepts.

    With ``search=True``: what ``re.search`` accepts, i.e. the pattern may be preceded and
    followed by anything on the sides it does not anchor. ``flags`` takes ``re.IGNORECASE``,
    ``re.DOTALL``, ``re.VERBOSE``, ``re.ASCII``, ``re.MULTILINE`` and ``re.UNICODE``.
    """
    return _regex_to_expr(pattern, int(flags), search)


def regex_grammar(pattern: str, flags: int = 0) -> GrammarIR:
    """A one-rule grammar (``root``) for ``pattern``, matched as ``re.fullmatch`` would."""
    return GrammarIR(rules={"root": Rule("root", regex_to_expr(pattern, flags))}, start="root")


@functools.lru_cache(maxsize=4096)
def _regex_to_expr(pattern: str, flags: int, search: bool) -> Expr:
    global_flags = _validate(pattern, flags)
    tree = _Parser(pattern, global_flags).parse()
    side = _OPEN if search else _EDGE
    return _Converter(pattern).convert(tree, side, side)


def _validate(pattern: str, flags: int) -> int:
    """Compile with ``re`` (the judge of what is valid); return the flags of the whole pattern."""
    _check_nesting(pattern)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compiled = re.compile(pattern, flags & ~re.DEBUG)
        except re.error as exc:
            raise GrammarSyntaxError(f"invalid regular expression: {exc.msg}", pattern, exc.pos or 0,
                                     _SOURCE) from exc
        except (ValueError, TypeError, OverflowError) as exc:
            raise GrammarError(f"invalid regular expression {pattern!r}: {exc}") from exc
    return int(compiled.flags)


def _check_nesting(pattern: str) -> None:
    """Refuse groups nested deeper than `MAX_NESTING` before ``re`` (whose parser recurses per
    group) or this module's parser see them."""
    depth = 0
    index = 0
    in_class = False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern.startswith("]", index + 1) or pattern.startswith("^]", index + 1):
                index += 2 if pattern[index + 1] == "]" else 3  # (a leading "]" is a member)
                continue
        elif char == "(":
            depth += 1
            if depth > MAX_NESTING:
                raise GrammarSyntaxError(f"nesting deeper than {MAX_NESTING} groups", pattern, index, _SOURCE)
        elif char == ")":
            depth -= 1
        index += 1


# ------------------------------------------------------------------------------------------
# Code point sets, from ``re`` itself
# ------------------------------------------------------------------------------------------

@functools.cache
def _every_code_point() -> str:
    """Every code point in order, surrogates included (decoded from UTF-32: a tenth of the time of
    joining a million one-character strings, which every first ``\\w`` of a process paid)."""
    return np.arange(MAX_CODE_POINT + 1, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")


def _without_surrogates(ranges: Ranges) -> Ranges:
    """Surrogates have no UTF-8 encoding: no byte string can contain one."""
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if lo < 0xD800:
            out.append((lo, min(hi, 0xD7FF)))
        if hi > 0xDFFF:
            out.append((max(lo, 0xE000), hi))
    return tuple(out)


@functools.cache
def _scan(one_char_regex: str, flags: int) -> Ranges:
    """The code points that ``one_char_regex`` matches under ``flags``, as ranges.

    ``(?:X)+`` over the string of all code points in order matches each maximal run of
    consecutive members once, so the matches are exactly the ranges.
    """
    compiled = re.compile(f"(?:{one_char_regex})+", flags)
    found = tuple((m.start(), m.end() - 1) for m in compiled.finditer(_every_code_point()))
    return _without_surrogates(found)


def _category(letter: str, ascii_only: bool) -> Ranges:
    return _scan("\\" + letter, _A if ascii_only else 0)


def _word_chars(ascii_only: bool) -> Ranges:
    return _category("w", ascii_only)


def _intersects(a: Ranges, b: Ranges) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False


def _union(a: Ranges, b: Ranges) -> Ranges:
    return normalize_ranges(a + b)


def _complement(ranges: Ranges) -> Ranges:
    return _without_surrogates(complement_ranges(normalize_ranges(ranges)))


_EVERYTHING: Ranges = _without_surrogates(((0, MAX_CODE_POINT),))
_NOT_NEWLINE: Ranges = _without_surrogates(((0, 9), (11, MAX_CODE_POINT)))
_NEWLINE: Ranges = ((10, 10),)


# ------------------------------------------------------------------------------------------
# Parse tree
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Set:
    """One character from ``ranges`` (flags already applied)."""

    ranges: Ranges


@dataclass(frozen=True)
class _Seq:
    items: tuple[_Node, ...]


@dataclass(frozen=True)
class _Alt:
    alternatives: tuple[_Node, ...]


@dataclass(frozen=True)
class _Rep:
    item: _Node
    min: int
    max: int | None
    pos: int
    possessive: bool = False
    lazy: bool = False


@dataclass(frozen=True)
class _Anchor:
    """A zero-width assertion: ``A`` (\\A), ``^``, ``^m`` (MULTILINE), ``Z``, ``$``, ``$m``, ``b``, ``B``."""

    kind: str
    pos: int
    ascii_only: bool = False


@dataclass(frozen=True)
class _Atomic:
    item: _Node
    pos: int


_Node: TypeAlias = Union[_Set, _Seq, _Alt, _Rep, _Anchor, _Atomic]  # noqa: UP007


class _Parser:
    """Reads a pattern that ``re`` has accepted, following ``re._parser``'s rules."""

    def __init__(self, pattern: str, global_flags: int) -> None:
        self.pattern = pattern
        self.pos = 0
        self.global_flags = global_flags

    def parse(self) -> _Node:
        node = self._alternation(self.global_flags)
        if self.pos != len(self.pattern):  # pragma: no cover - re.compile refuses unbalanced ')'
            raise UnsupportedRegexError("unbalanced parenthesis", self.pattern, self.pos)
        return node

    # -- structure --------------------------------------------------------------------------

    def _alternation(self, flags: int) -> _Node:
        branches = [self._sequence(flags)]
        while self._peek() == "|":
            self.pos += 1
            branches.append(self._sequence(flags))
        return branches[0] if len(branches) == 1 else _Alt(tuple(branches))

    def _sequence(self, flags: int) -> _Node:
        items: list[_Node] = []
        while True:
            char = self._peek()
            if char is None or char in "|)":
                break
            self.pos += 1
            if flags & _X and char in _WHITESPACE:
                continue
            if flags & _X and char == "#":
                self._skip_through("\n")
                continue
            if char in "*+?{":
                self._quantifier(char, items, flags)
                continue
            item = self._atom(char, flags)
            if item is not None:
                items.append(item)
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def _quantifier(self, char: str, items: list[_Node], flags: int) -> None:
        start = self.pos - 1
        if char == "{":
            bounds = self._braces()
            if bounds is None:  # not a quantifier: a literal '{'
                items.append(self._char(ord("{"), flags))
                return
            low, high = bounds
        else:
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        lazy = self._peek() == "?"
        possessive = self._peek() == "+"
        if lazy or possessive:
            self.pos += 1
        items[-1] = _Rep(items[-1], low, high, start, possessive, lazy)

    def _braces(self) -> tuple[int, int | None] | None:
        """``{m}``, ``{m,}``, ``{,n}``, ``{m,n}`` (``pos`` just after ``{``), or None for a literal."""
        here = self.pos
        if self._peek() == "}":
            return None
        low = self._digits()
        if self._peek() == ",":
            self.pos += 1
            high = self._digits()
        else:
            high = low
        if self._peek() != "}":
            self.pos = here
            return None
        self.pos += 1
        return (int(low) if low else 0), (int(high) if high else None)

    def _digits(self) -> str:
        start = self.pos
        while self._peek() in _DIGITS:
            self.pos += 1
        return self.pattern[start:self.pos]

    # -- atoms ------------------------------------------------------------------------------

    def _atom(self, char: str, flags: int) -> _Node | None:
        start = self.pos - 1
        if char == "\\":
            return self._escape(start, flags)
        if char == "[":
            return self._class(flags)
        if char == "(":
            return self._group(start, flags)
        if char == ".":
            return _Set(_EVERYTHING if flags & _S else _NOT_NEWLINE)
        if char == "^":
            return _Anchor("^m" if flags & _M else "^", start)
        if char == "$":
            return _Anchor("$m" if flags & _M else "$", start)
        return self._char(ord(char), flags)

    def _escape(self, start: int, flags: int) -> _Node:
        letter = self._next()
        if letter in "AZ":
            return _Anchor(letter, start)
        if letter in "bB":
            return _Anchor(letter, start, bool(flags & _A))
        if letter in "dDsSwW":
            if flags & _I:
                return _Set(_scan("\\" + letter, flags & (_I | _A)))
            return _Set(_category(letter, bool(flags & _A)))
        if letter in "123456789":
            digits = letter
            if self._peek() in _DIGITS:
                digits += self._next()
                if digits[0] in _OCTAL and digits[1] in _OCTAL and self._peek() in _OCTAL:
                    return self._char(int(digits + self._next(), 8), flags)
            raise UnsupportedRegexError(f"back-reference \\{digits} cannot be matched by a grammar",
                                        self.pattern, start)
        if letter == "0":
            digits = self._take_while(_OCTAL, 2)
            return self._char(int("0" + digits, 8), flags)
        return self._char(self._code(letter, start, in_class=False), flags)

    def _code(self, letter: str, start: int, in_class: bool) -> int:
        """The code point of the escape ``\\letter...`` (the letter already read)."""
        if letter in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[letter]
        if in_class and letter == "b":
            return 0x08
        if letter in _HEX_WIDTH:
            return int(self._take_while(_HEX, _HEX_WIDTH[letter]), 16)
        if letter == "N":
            close = self.pattern.index("}", self.pos)
            name = self.pattern[self.pos + 1:close]
            self.pos = close + 1
            return ord(unicodedata.lookup(name))
        if in_class and letter in _OCTAL:
            return int(letter + self._take_while(_OCTAL, 2), 8)
        if letter.isascii() and letter.isalnum():  # pragma: no cover - re.compile refuses these
            raise UnsupportedRegexError(f"unknown escape \\{letter}", self.pattern, start)
        return ord(letter)

    def _char(self, code: int, flags: int) -> _Set:
        if flags & _I and not (code < 0x80 and not chr(code).isalpha()):
            return _Set(_scan(f"\\U{code:08x}", flags & (_I | _A)))
        return _Set(_without_surrogates(((code, code),)))

    def _class(self, flags: int) -> _Set:
        negated = self._peek() == "^"
        if negated:
            self.pos += 1
        items: list[int | tuple[int, int] | str] = []  # code points, ranges, category letters
        while True:
            char = self._next()
            if char == "]" and items:
                break
            first = self._class_item(char)
            if self._peek() == "-":
                self.pos += 1
                after = self._next()
                if after == "]":
                    items += [first, 0x2D]
                    break
                last = self._class_item(after)
                assert isinstance(first, int) and isinstance(last, int)  # re refuses category ranges
                items.append((first, last))
            else:
                items.append(first)
        if flags & _I:
            # The same items, spelled canonically: re folds a range and a single character
            # differently in corner cases, so each keeps its form.
            body = "".join(f"\\{item}" if isinstance(item, str) else f"\\U{item:08x}" if isinstance(item, int)
                           else f"\\U{item[0]:08x}-\\U{item[1]:08x}" for item in items)
            return _Set(_scan(f"[{'^' if negated else ''}{body}]", flags & (_I | _A)))
        ranges: Ranges = ()
        for item in items:
            if isinstance(item, str):
                ranges += _category(item, bool(flags & _A))
            else:
                ranges += ((item, item),) if isinstance(item, int) else (item,)
        ranges = normalize_ranges(ranges)
        return _Set(_complement(ranges) if negated else _without_surrogates(ranges))

    def _class_item(self, char: str) -> int | str:
        """One class member starting with ``char``: a code point, or a category letter."""
        if char != "\\":
            return ord(char)
        start = self.pos - 1
        letter = self._next()
        if letter in "dDsSwW":
            return letter
        return self._code(letter, start, in_class=True)

    def _group(self, start: int, flags: int) -> _Node | None:
        if self._peek() != "?":
            return self._group_body(flags)
        self.pos += 1
        kind = self._next()
        if kind == ":":
            return self._group_body(flags)
        if kind == "P":
            if self._next() == "=":
                raise UnsupportedRegexError("back-reference (?P=...) cannot be matched by a grammar",
                                            self.pattern, start)
            self.pos = self.pattern.index(">", self.pos) + 1
            return self._group_body(flags)
        if kind == "#":
            self._skip_through(")")
            return None
        if kind in "=!":
            raise UnsupportedRegexError(f"lookahead (?{kind}...) cannot be matched by a grammar",
                                        self.pattern, start)
        if kind == "<":
            raise UnsupportedRegexError(f"lookbehind (?<{self._peek()}...) cannot be matched by a grammar",
                                        self.pattern, start)
        if kind == "(":
            raise UnsupportedRegexError("conditional (?(...)...) cannot be matched by a grammar",
                                        self.pattern, start)
        if kind == ">":
            return _Atomic(self._group_body(flags), start)
        self.pos -= 1
        return self._flag_group(flags)

    def _flag_group(self, flags: int) -> _Node | None:
        """``(?flags)`` (global: already applied) or ``(?on-off:...)`` (scoped)."""
        on = self._take_while(frozenset(_FLAG_LETTERS), len(self.pattern))
        off = ""
        if self._peek() == "-":
            self.pos += 1
            off = self._take_while(frozenset(_FLAG_LETTERS), len(self.pattern))
        if self._next() == ")":
            return None
        added = 0
        for letter in on:
            added |= _FLAG_LETTERS[letter]
        removed = 0
        for letter in off:
            removed |= _FLAG_LETTERS[letter]
        if added & _TYPE_FLAGS:
            flags &= ~_TYPE_FLAGS
        return self._group_body((flags | added) & ~removed)

    def _group_body(self, flags: int) -> _Node:
        node = self._alternation(flags)
        self.pos += 1  # the ')'
        return node

    # -- characters -------------------------------------------------------------------------

    def _peek(self) -> str | None:
        return self.pattern[self.pos] if self.pos < len(self.pattern) else None

    def _next(self) -> str:
        char = self.pattern[self.pos]
        self.pos += 1
        return char

    def _skip_through(self, terminator: str) -> None:
        """Skip past ``terminator`` (or to the end), reading escapes as ``re``'s tokenizer does:
        a backslash and the character after it are one token, never a terminator."""
        while self.pos < len(self.pattern):
            char = self._next()
            if char == "\\":
                self.pos += 1
            elif char == terminator:
                return

    def _take_while(self, allowed: frozenset[str], limit: int) -> str:
        start = self.pos
        while self.pos - start < limit and self._peek() in allowed:
            self.pos += 1
        return self.pattern[start:self.pos]


# ------------------------------------------------------------------------------------------
# Conversion, with anchors decided by their surroundings
# ------------------------------------------------------------------------------------------

# What lies on one side of a position. Left: the string start, or the previous character is a
# newline, a word character, or another character. Right: the string end, a final newline, a
# newline with more after it, a word character, or another character.
_L_START, _L_NEWLINE, _L_WORD, _L_OTHER = "start", "newline", "word", "other"
_R_END, _R_FINAL_NEWLINE, _R_NEWLINE, _R_WORD, _R_OTHER = "end", "final newline", "newline", "word", "other"
_B_FAILS_ON_EMPTY = sys.version_info < (3, 14)
_LEFT_STATES = (_L_START, _L_NEWLINE, _L_WORD, _L_OTHER)
_RIGHT_STATES = (_R_END, _R_FINAL_NEWLINE, _R_NEWLINE, _R_WORD, _R_OTHER)


@dataclass(frozen=True)
class _Side:
    """What may be adjacent to an item on one side.

    ``open``: the unanchored end of a search pattern — anything may lie beyond, and the item
    there is the one that lets it (emits ``.*``). Otherwise ``chars`` may be adjacent and, if
    ``edge``, the string may begin or end there.
    """

    open: bool = False
    chars: Ranges = ()
    edge: bool = False

    def __or__(self, other: _Side) -> _Side:
        if self.open or other.open:
            return _UNKNOWN
        if not other.chars or other.chars == self.chars or self.chars == _EVERYTHING:
            chars = self.chars
        elif not self.chars or other.chars == _EVERYTHING:
            chars = other.chars
        else:
            chars = _union(self.chars, other.chars)
        return _Side(chars=chars, edge=self.edge or other.edge)


_EDGE = _Side(edge=True)
_OPEN = _Side(open=True)
_UNKNOWN = _Side(chars=_EVERYTHING, edge=True)
_ANY_STAR: Expr = Repeat(char_class(_EVERYTHING), 0, None)


def _anchor_holds(kind: str, left: str, right: str) -> bool:
    if kind in ("A", "^"):
        return left == _L_START
    if kind == "^m":
        return left in (_L_START, _L_NEWLINE)
    if kind == "Z":
        return right == _R_END
    if kind == "$":
        return right in (_R_END, _R_FINAL_NEWLINE)
    if kind == "$m":
        return right in (_R_END, _R_FINAL_NEWLINE, _R_NEWLINE)
    is_boundary = (left == _L_WORD) != (right == _R_WORD)
    if kind == "b":
        return is_boundary
    # Before Python 3.14, \B never matches in an empty string.
    return not is_boundary and not (_B_FAILS_ON_EMPTY and left == _L_START and right == _R_END)


class _Converter:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._sensitivity: dict[int, bool] = {}

    def _sensitive(self, node: _Node) -> bool:
        """Whether ``node`` contains an anchor, an atomic group or a possessive quantifier."""
        key = id(node)
        if key not in self._sensitivity:
            if isinstance(node, (_Anchor, _Atomic)) or (isinstance(node, _Rep) and node.possessive):
                found = True
            elif isinstance(node, _Seq):
                found = any(self._sensitive(item) for item in node.items)
            elif isinstance(node, _Alt):
                found = any(self._sensitive(alt) for alt in node.alternatives)
            elif isinstance(node, _Rep):
                found = self._sensitive(node.item)
            else:
                found = False
            self._sensitivity[key] = found
        return self._sensitivity[key]

    def convert(self, node: _Node, left: _Side, right: _Side) -> Expr:
        if isinstance(node, _Set):
            return self._open_ends(_set_expr(node.ranges), left, right)
        if isinstance(node, _Alt):
            return choice(*(self.convert(alt, left, right) for alt in node.alternatives))
        if isinstance(node, _Seq):
            return self._sequence(node.items, left, right)
        if isinstance(node, _Anchor):
            return self._sequence((node,), left, right)
        if isinstance(node, _Rep):
            return self._repeat(node, left, right)
        self._check_atomic(node.item, right, node.pos, "atomic group (?>...)")
        return self.convert(node.item, left, right)

    # -- sequences and their anchors --------------------------------------------------------

    def _sequence(self, items: tuple[_Node, ...], left: _Side, right: _Side) -> Expr:
        consuming = [i for i, item in enumerate(items) if not isinstance(item, _Anchor)]
        if not consuming:
            return self._cluster(_anchors(items), left, right)[0]
        first, last = consuming[0], consuming[-1]
        parts: list[Expr] = []
        if first > 0:  # anchors before the first character: they may pin a search's free prefix
            expr, left, _ = self._cluster(_anchors(items[:first]), left, self._side_after(items, first, right))
            parts.append(expr)
        trailing: Expr = EMPTY
        if last < len(items) - 1:
            trailing, _, right = self._cluster(_anchors(items[last + 1:]), self._side_before(items, last + 1, left),
                                               right)
        index = first
        while index <= last:
            item = items[index]
            if not isinstance(item, _Anchor) and not self._sensitive(item):
                # Only anchors, atomic groups and possessive quantifiers look at their
                # neighbours; anything else only needs to know about an open end.
                parts.append(self.convert(item, left if index == first else _UNKNOWN,
                                          right if index == last else _UNKNOWN))
                index += 1
                continue
            before = left if index == first else self._side_before(items, index, left)
            if isinstance(item, _Anchor):  # anchors between two characters
                run_end = index
                while isinstance(items[run_end], _Anchor):
                    run_end += 1
                after = self._side_after(items, run_end, right)
                parts.append(self._cluster(_anchors(items[index:run_end]), before, after)[0])
                index = run_end
                continue
            after = right if index == last else self._side_after(items, index + 1, right)
            parts.append(self.convert(item, before, after))
            index += 1
        parts.append(trailing)
        return NOTHING if NOTHING in parts else seq(*parts)

    def _side_before(self, items: tuple[_Node, ...], index: int, start: _Side) -> _Side:
        """What may precede ``items[index]``: last characters of earlier items, then ``start``."""
        side = _Side()
        for item in reversed(items[:index]):
            chars, nullable = _edge_chars(item, last=True)
            side = side | _Side(chars=chars)
            if not nullable:
                return side
        return side | start

    def _side_after(self, items: tuple[_Node, ...], index: int, end: _Side) -> _Side:
        """What may follow ``items[index - 1]``: first characters of later items, then ``end``."""
        side = _Side()
        for item in items[index:]:
            chars, nullable = _edge_chars(item, last=False)
            side = side | _Side(chars=chars)
            if not nullable:
                return side
        return side | end

    def _cluster(self, anchors: tuple[_Anchor, ...], left: _Side, right: _Side) -> tuple[Expr, _Side, _Side]:
        """Anchors between the same two characters; returns the expression they become (empty,
        nothing, or the free prefix/suffix of a search) and what then lies on each side."""
        ascii_modes = {a.ascii_only for a in anchors if a.kind in "bB"}
        if len(ascii_modes) > 1:
            raise UnsupportedRegexError("\\b or \\B under different ASCII flags at one position",
                                        self.pattern, anchors[0].pos)
        # Only \b and \B tell word characters from others; the rest treat them alike.
        word = _word_chars(ascii_modes.pop()) if ascii_modes else ()

        def holds(lstate: str, rstate: str) -> bool:
            return all(_anchor_holds(a.kind, lstate, rstate) for a in anchors)

        if not left.open and not right.open:
            verdicts = {holds(ls, rs) for ls in _left_states(left, word) for rs in _right_states(right, word)}
            if verdicts == {False}:
                return NOTHING, left, right
            if False in verdicts:
                raise self._undecided(anchors, word, left, right)
            return EMPTY, left, right
        if left.open and right.open:
            pairs = [(ls, rs) for ls in _LEFT_STATES for rs in _RIGHT_STATES if holds(ls, rs)]
            lefts = frozenset(ls for ls, _ in pairs)
            rights = frozenset(rs for _, rs in pairs)
            if len(pairs) == len(lefts) * len(rights):  # independent sides
                expr = seq(_free_end(lefts, _LEFT_STATES, lambda s: _prefix(s, word)),
                           _free_end(rights, _RIGHT_STATES, lambda s: _suffix(s, word)))
            else:
                expr = choice(*(seq(_prefix(ls, word), _suffix(rs, word)) for ls, rs in pairs))
            return (expr if pairs else NOTHING), _UNKNOWN, _UNKNOWN
        if left.open:
            allowed = {frozenset(ls for ls in _LEFT_STATES if holds(ls, rs)) for rs in _right_states(right, word)}
            if len(allowed) > 1:
                raise self._undecided(anchors, word, left, right)
            chosen = allowed.pop() if allowed else frozenset()
            return _free_end(chosen, _LEFT_STATES, lambda s: _prefix(s, word)), _left_side(chosen, word), right
        allowed = {frozenset(rs for rs in _RIGHT_STATES if holds(ls, rs)) for ls in _left_states(left, word)}
        if len(allowed) > 1:
            raise self._undecided(anchors, word, left, right)
        chosen = allowed.pop() if allowed else frozenset()
        return _free_end(chosen, _RIGHT_STATES, lambda s: _suffix(s, word)), left, _right_side(chosen, word)

    def _undecided(self, anchors: tuple[_Anchor, ...], word: Ranges, left: _Side,
                   right: _Side) -> UnsupportedRegexError:
        """The error for the first anchor whose truth depends on the input."""
        lstates = _LEFT_STATES if left.open else _left_states(left, word)
        rstates = _RIGHT_STATES if right.open else _right_states(right, word)
        culprit = anchors[0]
        for anchor in anchors:
            if len({_anchor_holds(anchor.kind, ls, rs) for ls in lstates for rs in rstates}) > 1:
                culprit = anchor
                break
        shown = {"A": "\\A", "Z": "\\Z", "b": "\\b", "B": "\\B", "^m": "^", "$m": "$"}.get(culprit.kind, culprit.kind)
        if culprit.kind in "bB":
            reason = "the characters around it are not all word or all non-word characters"
        elif culprit.kind in ("A", "^", "^m"):
            reason = "it is not at the start of the pattern"
        else:
            reason = "it is not at the end of the pattern"
        return UnsupportedRegexError(f"anchor {shown} cannot be matched by a grammar here: {reason}",
                                     self.pattern, culprit.pos)

    # -- repetition -------------------------------------------------------------------------

    def _repeat(self, node: _Rep, left: _Side, right: _Side) -> Expr:
        if node.possessive:
            self._check_atomic(node, right, node.pos, "possessive quantifier")
        if node.max == 0:
            return self._sequence((), left, right)
        if node.min == 1 and node.max == 1:
            return self.convert(node.item, left, right)
        if node.max == 1:
            return self.convert(_Alt((_Seq(()), node.item)), left, right)
        last_chars, _ = _edge_chars(node.item, last=True)
        first_chars, _ = _edge_chars(node.item, last=False)
        inner_left = _UNKNOWN if left.open else left | _Side(chars=last_chars)
        inner_right = _UNKNOWN if right.open else right | _Side(chars=first_chars)
        body = Repeat(self.convert(node.item, inner_left, inner_right), node.min, node.max)
        return self._open_ends(body, left, right)

    def _check_atomic(self, body: _Node, right: _Side, pos: int, what: str) -> None:
        """Atomic matching (``(?>...)``, ``*+``) equals ordinary matching when nothing follows in a
        search, or for a run of one character class that what follows cannot start with."""
        if right.open:
            return
        run = _single_class_run(body)
        if run is not None and not _intersects(run, right.chars):
            return
        raise UnsupportedRegexError(f"{what} cannot be matched by a grammar here: what follows may start with "
                                    "a character it would have to give back", self.pattern, pos)

    @staticmethod
    def _open_ends(expr: Expr, left: _Side, right: _Side) -> Expr:
        return seq(_ANY_STAR if left.open else EMPTY, expr, _ANY_STAR if right.open else EMPTY)


def _anchors(items: tuple[_Node, ...]) -> tuple[_Anchor, ...]:
    anchors = tuple(item for item in items if isinstance(item, _Anchor))
    assert len(anchors) == len(items)
    return anchors


def _single_class_run(node: _Node) -> Ranges | None:
    """The class of ``node`` if it is one character class, or one greedy repetition of one: then
    its first match is its longest, and atomic matching only refuses what could never fit."""
    while isinstance(node, _Atomic):
        node = node.item
    if isinstance(node, _Rep) and not node.lazy:
        node = node.item
        while isinstance(node, _Atomic):
            node = node.item
    return node.ranges if isinstance(node, _Set) else None


def _set_expr(ranges: Ranges) -> Expr:
    if not ranges:
        return NOTHING
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return literal(chr(ranges[0][0]))
    return char_class(ranges)


def _edge_chars(node: _Node, last: bool) -> tuple[Ranges, bool]:
    """The characters ``node`` can start (or end, if ``last``) with, and whether it can be empty."""
    if isinstance(node, _Set):
        return node.ranges, False
    if isinstance(node, _Anchor):
        return (), True
    if isinstance(node, _Alt):
        found = [_edge_chars(alt, last) for alt in node.alternatives]
        return normalize_ranges(tuple(r for chars, _ in found for r in chars)), any(n for _, n in found)
    if isinstance(node, _Seq):
        chars: Ranges = ()
        for item in reversed(node.items) if last else node.items:
            item_chars, nullable = _edge_chars(item, last)
            chars = _union(chars, item_chars)
            if not nullable:
                return chars, False
        return chars, True
    if isinstance(node, _Rep):
        if node.max == 0:
            return (), True
        chars, nullable = _edge_chars(node.item, last)
        return chars, nullable or node.min == 0
    return _edge_chars(node.item, last)


def _other_chars(word: Ranges) -> Ranges:
    return _complement(_union(word, _NEWLINE))


def _left_states(side: _Side, word: Ranges) -> list[str]:
    states = [_L_START] if side.edge else []
    if _intersects(side.chars, _NEWLINE):
        states.append(_L_NEWLINE)
    if _intersects(side.chars, word):
        states.append(_L_WORD)
    if _intersects(side.chars, _other_chars(word)):
        states.append(_L_OTHER)
    return states


def _right_states(side: _Side, word: Ranges) -> list[str]:
    states = [_R_END] if side.edge else []
    if _intersects(side.chars, _NEWLINE):
        states += [_R_FINAL_NEWLINE, _R_NEWLINE]
    if _intersects(side.chars, word):
        states.append(_R_WORD)
    if _intersects(side.chars, _other_chars(word)):
        states.append(_R_OTHER)
    return states


def _state_chars(state: str, word: Ranges) -> Ranges:
    if state in (_L_NEWLINE, _R_FINAL_NEWLINE, _R_NEWLINE):
        return _NEWLINE
    if state in (_L_WORD, _R_WORD):
        return word
    return _other_chars(word)


def _left_side(states: frozenset[str], word: Ranges) -> _Side:
    chars = tuple(r for s in states if s != _L_START for r in _state_chars(s, word))
    return _Side(chars=normalize_ranges(chars), edge=_L_START in states)


def _right_side(states: frozenset[str], word: Ranges) -> _Side:
    chars = tuple(r for s in states if s != _R_END for r in _state_chars(s, word))
    return _Side(chars=normalize_ranges(chars), edge=_R_END in states)


def _prefix(state: str, word: Ranges) -> Expr:
    """Strings that put the position after them in ``state`` (a left state)."""
    if not _state_chars(state, word) and state != _L_START:
        return NOTHING
    if state == _L_START:
        return EMPTY
    return seq(_ANY_STAR, _set_expr(_state_chars(state, word)))


def _suffix(state: str, word: Ranges) -> Expr:
    """Strings that put the position before them in ``state`` (a right state)."""
    if state == _R_END:
        return EMPTY
    if state == _R_FINAL_NEWLINE:
        return literal("\n")
    if state == _R_NEWLINE:
        return seq(literal("\n"), char_class(_EVERYTHING), _ANY_STAR)
    if not _state_chars(state, word):
        return NOTHING
    return seq(_set_expr(_state_chars(state, word)), _ANY_STAR)


def _free_end(chosen: frozenset[str], every: tuple[str, ...], build: Callable[[str], Expr]) -> Expr:
    """The free prefix (or suffix) of a search that ends in one of the ``chosen`` states."""
    if len(chosen) == len(every):
        return _ANY_STAR
    return choice(*(build(state) for state in every if state in chosen)) if chosen else NOTHING
