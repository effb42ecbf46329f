"""Python's indentation, inside the engine's state: NEWLINE, INDENT and DEDENT as its tokenizer makes them.

A grammar that ``%declare``s ``_INDENT`` and ``_DEDENT`` and has a ``_NEWLINE`` (or ``_NL``)
terminal is parsed with this tracker between the lexer and the parser, in place of Lark's
``Indenter`` post-lexer. Its semantics are CPython's tokenizer's, not Lark's:

- the newline terminal's text includes the blank and comment-only lines after it and the next
  line's indentation; the lexer measures that indentation byte by byte (:class:`Column`), so the
  tracker never needs the lexeme's text;
- inside brackets (``LPAR``/``LSQB``/``LBRACE`` … their closers) a newline is dropped;
  elsewhere it is passed to the parser and then the indentation is compared with the stack of
  levels: deeper pushes one ``_INDENT``, shallower pops one ``_DEDENT`` per level and must land
  on a level; levels are compared both with tabs to multiples of 8 and with tabs as 1 column,
  and must agree (Python's ``TabError``);
- the input starts as if after a newline that the parser never sees: the first line must be at
  column 0, leading blank and comment lines are ignored;
- at the end of the input, an implicit newline where the parser takes one, then a ``_DEDENT``
  per open level; not right after a backslash that joins lines (an ignored ``_LINE_JOIN``
  terminal, if the grammar names one).

States are interned `IndentKey` tuples (parser state, bracket depth, levels, at start, def
bodies and marks, completion scope), so the indentation stack is part of the combined state that
masks are cached by; every transition is memoised.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from codemask.engine import native
from codemask.engine.completion import CLOSING, CONTINUATION_TERMINALS, OVER, Scope
from codemask.engine.parser import DEAD, ParserCore

Column = tuple[int, int]  # indentation width with tabs to multiples of 8, and with tabs as 1
# What a newline lexeme measured: a Column, or, where backslash line joins sit inside the next
# line's indentation, (width, width with tabs as 1, flags) with these flags:
Measured = tuple[int, ...]
_FROZEN = 1  # a join after blanks fixed the indentation at its column (CPython 3.11)
_JOINED = 2  # right after a join's newline: the input may not end here
_JOINING = 4  # a join's backslash was read, its newline comes next
TAB_SIZE = 8
NEWLINE_NAMES = ("_NEWLINE", "_NL")
LINE_JOIN_NAME = "_LINE_JOIN"
OPENING_BRACKETS = ("LPAR", "LSQB", "LBRACE")
CLOSING_BRACKETS = ("RPAR", "RSQB", "RBRACE")


@dataclass(frozen=True)
class IndentSpec:
    """Which terminals (by index) are the newline, the brackets, and the injected INDENT/DEDENT."""

    newline: int
    indent: int
    dedent: int
    opening: frozenset[int]
    closing: frozenset[int]
    line_join: int = -1  # the ignored terminal of a backslash and newline, or -1


def indent_spec(names: list[str], declared_prefix: str = "declared:") -> IndentSpec | None:
    """The indentation set-up of a lexer-mode grammar by Lark's convention, or None.

    It applies when ``_INDENT`` and ``_DEDENT`` are declared (no pattern) and a ``_NEWLINE``
    or ``_NL`` terminal exists; brackets are Lark's names for ``(``, ``[``, ``{`` and closers.
    """
    index = {name: i for i, name in enumerate(names)}
    indent, dedent = index.get(declared_prefix + "_INDENT"), index.get(declared_prefix + "_DEDENT")
    newline = next((index[n] for n in NEWLINE_NAMES if n in index), None)
    if indent is None or dedent is None or newline is None:
        return None
    return IndentSpec(newline=newline, indent=indent, dedent=dedent,
                      opening=frozenset(index[n] for n in OPENING_BRACKETS if n in index),
                      closing=frozenset(index[n] for n in CLOSING_BRACKETS if n in index),
                      line_join=index.get(LINE_JOIN_NAME, -1))


def next_column(column: Measured | None, byte: int) -> Measured | None:
    """The indentation measured after one more byte of a newline lexeme (None: not measuring).

    A backslash and newline inside the indentation join the next line (CPython's tokenizer): at
    column 0 the next line's indentation counts, after blanks the column of the backslash does,
    whatever follows (`_FROZEN`); a blank line or comment after the join starts over.
    """
    if column is None:
        return (0, 0) if byte == 0x0A or byte == 0x0C else None
    width, tabs_as_one, flags = column if len(column) == 3 else (*column, 0)
    frozen = flags & _FROZEN
    if flags & _JOINING:
        if byte == 0x0D:  # the CR of a CR LF join
            return column
        return (width, tabs_as_one, frozen | _JOINED) if byte == 0x0A else None
    if byte == 0x0A:  # a new line (after a join: a blank one, which starts over)
        return (0, 0)
    if byte == 0x5C:  # a backslash: a join (the newline lexeme only takes one followed by a newline)
        return (width, tabs_as_one, (_FROZEN if frozen or width else 0) | _JOINING)
    if frozen:
        return (width, tabs_as_one, _FROZEN) if byte in (0x20, 0x09, 0x0C) else None
    if byte == 0x0C:  # a form feed resets the column
        return (0, 0)
    if byte == 0x20:
        return (width + 1, tabs_as_one + 1)
    if byte == 0x09:
        return ((width // TAB_SIZE + 1) * TAB_SIZE, tabs_as_one + 1)
    return None  # a comment or a carriage return: this line's indentation does not count


def measured(column: Measured | None) -> tuple[Column | None, bool]:
    """A newline's indentation without its join flags, and whether it ended right after a join."""
    if column is None:
        return None, False
    return (column[0], column[1]), len(column) == 3 and bool(column[2] & _JOINED)


IndentKey = tuple[int, int, tuple[Column, ...], bool, int, Scope | None]
# (grammar parser state, bracket depth, levels, at start, def bodies, completion scope); "def
# bodies" is a bit set over the levels (bit i: level i is a function body) plus bit 62 set
# while a `def` header waits for its block, and bit 61 right after a line join (the input may
# not end there)
_PENDING_DEF = 1 << 62
_AFTER_JOIN = 1 << 61


class SymbolParser:
    """The parser as the lexer layer sees it: terminals in, states out (no indentation)."""

    def __init__(self, parser: ParserCore) -> None:
        self.parser = parser
        self.initial = parser.initial
        self._allowed: dict[int, frozenset[int]] = {}

    def allowed(self, pid: int) -> frozenset[int]:
        """The terminals the parser takes in state ``pid``."""
        found = self._allowed.get(pid)
        if found is None:
            found = self._allowed[pid] = self.parser.allowed_set(pid)
        return found

    def step(self, pid: int, terminal: int, column: Measured | None) -> int:
        return self.parser.step(pid, terminal)

    def can_end(self, pid: int) -> bool:
        return self.parser.can_end(pid)

    def ignored(self, pid: int, terminal: int) -> int:
        """The state after an ignored lexeme: the same."""
        return pid

    def native_layout(self, kinds: np.ndarray) -> dict[str, Any]:
        """`native.symbol_steps`' arguments for this parser (the terminals' ``kinds`` flags are
        set in place): plain parser steps, no indentation."""
        return {"keys": None, "index": None, "key_lock": None, "indent": -1, "dedent": -1, "newline": -1}


class IndentingParser(SymbolParser):
    """The parser behind Python's indentation tracker; its states carry brackets and levels.

    A state may also carry a completion :class:`~codemask.engine.completion.Scope` (see
    :meth:`scoped`): then ``can_end`` means "the unit is complete" and nothing may follow it.
    """

    def __init__(self, parser: ParserCore, spec: IndentSpec, names: list[str] | None = None) -> None:
        super().__init__(parser)
        self.spec = spec
        index = {name: i for i, name in enumerate(names or [])}
        self.continuations = frozenset(index[n] for n in CONTINUATION_TERMINALS if n in index)
        self.def_terminal = index.get("DEF", -1)
        self.keys: list[IndentKey] = []
        self._index: dict[IndentKey, int] = {}
        self._steps: dict[tuple[int, int, Measured | None], int] = {}
        self._outer_allowed: dict[int, frozenset[int]] = {}
        self._distinct_sets: dict[frozenset[int], frozenset[int]] = {}
        self._ends: dict[int, bool] = {}
        self._lock = threading.RLock()
        self.initial = self.intern((parser.initial, 0, ((0, 0),), True, 0, None))

    def intern(self, key: IndentKey) -> int:
        found = self._index.get(key)
        if found is None:
            with self._lock:
                found = self._index.setdefault(key, len(self.keys))
                if found == len(self.keys):
                    self.keys.append(key)
        return found

    def native_layout(self, kinds: np.ndarray) -> dict[str, Any]:
        """`native.symbol_steps`' arguments: the tracker's terminals flagged in ``kinds``, and its
        states' keys, index and lock, which the C steps append to as `intern` does."""
        spec, flags = self.spec, native.SYMBOL_KINDS
        kinds[spec.newline] |= flags["newline"]
        kinds[sorted(spec.opening)] |= flags["opening"]
        kinds[sorted(spec.closing)] |= flags["closing"]
        if self.def_terminal >= 0:
            kinds[self.def_terminal] |= flags["def"]
        if spec.line_join >= 0:
            kinds[spec.line_join] |= flags["line_join"]
        return {"keys": self.keys, "index": self._index, "key_lock": self._lock, "indent": spec.indent,
                "dedent": spec.dedent, "newline": spec.newline}

    # -- what the lexer may produce ----------------------------------------------------------

    def allowed(self, pid: int) -> frozenset[int]:
        """Terminals the lexer may end a lexeme as: the parser's, plus newlines inside brackets."""
        found = self._outer_allowed.get(pid)
        if found is None:
            found = self._allowed_terminals(pid)
            # one object per distinct set: a set per state was tens of thousands for the collector
            found = self._outer_allowed[pid] = self._distinct_sets.setdefault(found, found)
        return found

    def _allowed_terminals(self, pid: int) -> frozenset[int]:
        inner, depth, _levels, at_start, _defs, scope = self.keys[pid]
        spec = self.spec
        if at_start:
            return frozenset((spec.newline,))
        if scope is not None and scope.phase == OVER:
            return frozenset()
        found = super().allowed(inner) - {spec.indent, spec.dedent}
        if depth:
            found |= {spec.newline}
        if scope is not None and scope.phase == CLOSING and self._complete(pid):
            found &= self.continuations  # the statement is complete: only its own clauses may follow
        return found

    # -- terminals ---------------------------------------------------------------------------

    def ignored(self, pid: int, terminal: int) -> int:
        """The state after an ignored lexeme: marked right after a line join, unmarked after
        anything else (CPython refuses the end of the input only right after the join)."""
        defs = self.keys[pid][4]
        if terminal == self.spec.line_join:
            marked = defs | _AFTER_JOIN
        elif defs & _AFTER_JOIN:
            marked = defs & ~_AFTER_JOIN
        else:
            return pid
        inner, depth, levels, at_start, _defs, scope = self.keys[pid]
        return self.intern((inner, depth, levels, at_start, marked, scope))

    def step(self, pid: int, terminal: int, column: Measured | None) -> int:
        key = (pid, terminal, column if terminal == self.spec.newline else None)
        found = self._steps.get(key)
        if found is None:
            found = self._steps[key] = self._step(*key)
        return found

    def _step(self, pid: int, terminal: int, measure: Measured | None) -> int:
        inner, depth, levels, at_start, defs, scope = self.keys[pid]
        spec, parser = self.spec, self.parser
        if terminal == spec.newline:
            column, joined = measured(measure)
            defs = defs & ~_AFTER_JOIN | (_AFTER_JOIN if joined else 0)
            if at_start:  # the lines before the first statement: it must start at column 0
                if column is not None and column != (0, 0):
                    return DEAD
                return self.intern((inner, 0, levels, False, defs, scope))
            if depth:
                return pid
            nxt = parser.step(inner, terminal)
            if nxt == DEAD:
                return DEAD
            return self._indent(nxt, levels, defs, scope, column)
        if scope is not None and terminal not in self.allowed(pid):
            return DEAD
        defs &= ~_AFTER_JOIN
        if terminal in spec.opening:
            depth += 1
        elif terminal in spec.closing:
            if not depth:
                return DEAD
            depth -= 1
        nxt = parser.step(inner, terminal)
        if nxt == DEAD:
            return DEAD
        if terminal == self.def_terminal:
            defs |= _PENDING_DEF
        if scope is not None:
            scope = scope.after_terminal()
        return self.intern((nxt, depth, levels, False, defs, scope))

    def _indent(self, inner: int, levels: tuple[Column, ...], defs: int, scope: Scope | None,
                column: Column | None) -> int:
        """After a newline: compare the new line's indentation with the levels (CPython's rules)."""
        pending, defs = bool(defs & _PENDING_DEF), defs & ~_PENDING_DEF
        before = len(levels)
        if column is not None:
            top = levels[-1]
            if column[0] == top[0]:
                if column[1] != top[1]:
                    return DEAD
            elif column[0] > top[0]:
                if column[1] <= top[1]:
                    return DEAD
                inner = self.parser.step(inner, self.spec.indent)
                if inner == DEAD:
                    return DEAD
                if pending:
                    defs |= 1 << len(levels)
                levels = (*levels, column)
            else:
                while levels and column[0] < levels[-1][0]:
                    levels = levels[:-1]
                    defs &= ~(1 << len(levels))
                    inner = self.parser.step(inner, self.spec.dedent)
                    if inner == DEAD:
                        return DEAD
                if not levels or levels[-1] != column:
                    return DEAD  # unindent does not match any outer level (or tabs disagree)
        if scope is not None:
            scope = scope.after_newline(before, len(levels), pending)
            if scope is None:
                return DEAD
        return self.intern((inner, 0, levels, False, defs, scope))

    # -- the end -----------------------------------------------------------------------------

    def can_end(self, pid: int) -> bool:
        """The input may end: brackets closed, an implicit newline if needed, every level closed.

        In a scoped state: the completion's unit is complete here.
        """
        found = self._ends.get(pid)
        if found is None:
            found = self._ends[pid] = self._can_end(pid)
        return found

    def _can_end(self, pid: int) -> bool:
        inner, depth, levels, at_start, defs, scope = self.keys[pid]
        if defs & _AFTER_JOIN:
            return False
        if scope is not None:
            return self._scope_can_end(pid)
        if depth:
            return False
        if at_start:
            return self.parser.can_end(inner)
        return any(self._closes(state, len(levels) - 1, 1)
                   for state in (inner, self.parser.step(inner, self.spec.newline)) if state != DEAD)

    def _closes(self, inner: int, dedents: int, base: int) -> bool:
        """Whether, after ``dedents`` DEDENTs, a statement list at level ``base`` may end."""
        for _ in range(dedents):
            inner = self.parser.step(inner, self.spec.dedent)
            if inner == DEAD:
                return False
        if base <= 1:
            return self.parser.can_end(inner)
        return self.parser.step(inner, self.spec.dedent) != DEAD

    def _complete(self, pid: int) -> bool:
        """Whether the statements at the scope's level are complete here (an implicit newline allowed)."""
        inner, depth, levels, at_start, _defs, scope = self.keys[pid]
        if depth or at_start or scope is None or scope.base is None or len(levels) < scope.base:
            return False
        return any(self._closes(state, len(levels) - scope.base, scope.base)
                   for state in (inner, self.parser.step(inner, self.spec.newline)) if state != DEAD)

    def _scope_can_end(self, pid: int) -> bool:
        inner, depth, _levels, at_start, _defs, scope = self.keys[pid]
        assert scope is not None
        if scope.phase == OVER:
            return True
        if scope.mode == "line":
            return not depth and not at_start and not scope.skip \
                and self.parser.step(inner, self.spec.newline) != DEAD
        return self._complete(pid)

    # -- completion scopes -------------------------------------------------------------------

    def scoped(self, pid: int, mode: str | None, newline_pending: bool) -> int:
        """State ``pid`` with a completion scope starting here (``mode=None``: without one).

        ``newline_pending``: the lexer is inside a newline lexeme after its ``\\n`` (the cursor is
        at the start of a line), so the next newline event belongs to the line before.
        """
        inner, depth, levels, at_start, defs, _scope = self.keys[pid]
        scope = None
        if mode is not None:
            innermost_def = max((i + 1 for i in range(len(levels)) if defs >> i & 1), default=None)
            scope = Scope.start(mode, len(levels), newline_pending and not at_start, innermost_def)
        return self.intern((inner, depth, levels, at_start, defs, scope))

    def levels(self, pid: int) -> tuple[Column, ...]:
        """The indentation levels open in state ``pid`` (the first is column 0)."""
        return self.keys[pid][2]
