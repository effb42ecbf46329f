"""Reading a Python ``re`` pattern into a syntax tree, and refusing what no grammar can match.

The regex front-end (:mod:`codemask.grammar.regex`) converts this tree to the grammar IR; reading
the pattern is apart because it only has to follow Python's rules, while the conversion has to
reason about what surrounds each item.

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
- **Characters as code point sets.** Flags are applied while reading: every single-character item
  becomes a :class:`Set` of the code points it matches (:mod:`codemask.grammar.regex_charsets`).
- **Refused here:** back-references, lookahead, lookbehind and conditionals, with
  :class:`UnsupportedRegexError` naming the construct and its column.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from dataclasses import dataclass
from typing import TypeAlias, Union

from codemask.errors import GrammarError, GrammarSyntaxError
from codemask.grammar.ir import MAX_NESTING, normalize_ranges
from codemask.grammar.regex_charsets import (
    EVERYTHING,
    NOT_NEWLINE,
    Ranges,
    category,
    complement,
    scan,
    without_surrogates,
)

_SOURCE = "<regex>"
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


def validate(pattern: str, flags: int) -> int:
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
# Syntax tree
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Set:
    """One character from ``ranges`` (flags already applied)."""

    ranges: Ranges


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    alternatives: tuple[Node, ...]


@dataclass(frozen=True)
class Rep:
    item: Node
    min: int
    max: int | None
    pos: int
    possessive: bool = False
    lazy: bool = False


@dataclass(frozen=True)
class Anchor:
    """A zero-width assertion: ``A`` (\\A), ``^``, ``^m`` (MULTILINE), ``Z``, ``$``, ``$m``, ``b``, ``B``."""

    kind: str
    pos: int
    ascii_only: bool = False


@dataclass(frozen=True)
class Atomic:
    item: Node
    pos: int


Node: TypeAlias = Union[Set, Seq, Alt, Rep, Anchor, Atomic]  # noqa: UP007


class Parser:
    """Reads a pattern that ``re`` has accepted, following ``re._parser``'s rules."""

    def __init__(self, pattern: str, global_flags: int) -> None:
        self.pattern = pattern
        self.pos = 0
        self.global_flags = global_flags

    def parse(self) -> Node:
        node = self._alternation(self.global_flags)
        if self.pos != len(self.pattern):  # pragma: no cover - re.compile refuses unbalanced ')'
            raise UnsupportedRegexError("unbalanced parenthesis", self.pattern, self.pos)
        return node

    # -- structure --------------------------------------------------------------------------

    def _alternation(self, flags: int) -> Node:
        branches = [self._sequence(flags)]
        while self._peek() == "|":
            self.pos += 1
            branches.append(self._sequence(flags))
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def _sequence(self, flags: int) -> Node:
        items: list[Node] = []
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
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def _quantifier(self, char: str, items: list[Node], flags: int) -> None:
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
        items[-1] = Rep(items[-1], low, high, start, possessive, lazy)

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

    def _atom(self, char: str, flags: int) -> Node | None:
        start = self.pos - 1
        if char == "\\":
            return self._escape(start, flags)
        if char == "[":
            return self._class(flags)
        if char == "(":
            return self._group(start, flags)
        if char == ".":
            return Set(EVERYTHING if flags & _S else NOT_NEWLINE)
        if char == "^":
            return Anchor("^m" if flags & _M else "^", start)
        if char == "$":
            return Anchor("$m" if flags & _M else "$", start)
        return self._char(ord(char), flags)

    def _escape(self, start: int, flags: int) -> Node:
        letter = self._next()
        if letter in "AZ":
            return Anchor(letter, start)
        if letter in "bB":
            return Anchor(letter, start, bool(flags & _A))
        if letter in "dDsSwW":
            if flags & _I:
                return Set(scan("\\" + letter, flags & (_I | _A)))
            return Set(category(letter, bool(flags & _A)))
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

    def _char(self, code: int, flags: int) -> Set:
        if flags & _I and not (code < 0x80 and not chr(code).isalpha()):
            return Set(scan(f"\\U{code:08x}", flags & (_I | _A)))
        return Set(without_surrogates(((code, code),)))

    def _class(self, flags: int) -> Set:
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
            return Set(scan(f"[{'^' if negated else ''}{body}]", flags & (_I | _A)))
        ranges: Ranges = ()
        for item in items:
            if isinstance(item, str):
                ranges += category(item, bool(flags & _A))
            else:
                ranges += ((item, item),) if isinstance(item, int) else (item,)
        ranges = normalize_ranges(ranges)
        return Set(complement(ranges) if negated else without_surrogates(ranges))

    def _class_item(self, char: str) -> int | str:
        """One class member starting with ``char``: a code point, or a category letter."""
        if char != "\\":
            return ord(char)
        start = self.pos - 1
        letter = self._next()
        if letter in "dDsSwW":
            return letter
        return self._code(letter, start, in_class=True)

    def _group(self, start: int, flags: int) -> Node | None:
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
            return Atomic(self._group_body(flags), start)
        self.pos -= 1
        return self._flag_group(flags)

    def _flag_group(self, flags: int) -> Node | None:
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

    def _group_body(self, flags: int) -> Node:
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

