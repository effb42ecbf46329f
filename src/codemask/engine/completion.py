"""Completion scopes: where a code completion that starts at a cursor may end (``until=``).

A scope is part of the indentation tracker's state (:mod:`codemask.engine.indentation`), so the
masks of scoped states are cached like any other. It watches the tracker's events — terminals,
and newlines with the indentation levels before and after them — relative to the point where the
completion starts, and decides two things: whether the unit is complete (EOS allowed), and whether
anything may still follow (after the unit, only EOS, whitespace and comments).

Units, with ``levels`` the number of open indentation levels (1 at module level):

- ``line``: the logical line at the cursor (the next one if the cursor is at the start of a
  line). EOS where the line could end (a NEWLINE would be accepted) and right after its newline;
  nothing after that newline.
- ``statement``: the innermost statement at the cursor (the next one at a statement boundary), at
  level ``base``. EOS where it is complete: after an implicit newline and dedents back to
  ``base``, the statements there may end. After its last line (a newline back to ``base``), only
  its own continuation clauses (``else``, ``elif``, ``except``, ``finally``) may follow, and only
  if it is already complete; a dedent below ``base`` ends it.
- ``block``: the block at the cursor (level ``base``); complete where that block may close; a
  dedent below ``base`` ends it.
- ``function``: the innermost function body at the cursor, or the first ``def`` that starts
  after it (with its decorators); complete where that body may close; a dedent out of it ends it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

MODES = ("line", "statement", "block", "function")
CONTINUATION_TERMINALS = ("ELSE", "ELIF", "EXCEPT", "FINALLY")
OPEN, CLOSING, OVER = 0, 1, 2


@dataclass(frozen=True)
class Scope:
    """The unit being completed: its kind, its level, and how far it has got."""

    mode: str
    base: int | None  # the unit's indentation level count (None: not known yet)
    phase: int = OPEN
    skip: bool = False  # the next newline event still belongs to the line before the cursor

    @staticmethod
    def start(mode: str, levels: int, newline_pending: bool, innermost_def: int | None) -> Scope:
        """The scope of a completion starting with ``levels`` levels open."""
        if mode not in MODES:
            raise ValueError(f"until= must be one of {', '.join(MODES)} or None, got {mode!r}")
        if mode == "line":
            return Scope(mode, None, skip=newline_pending)
        if mode == "function":
            return Scope(mode, innermost_def)
        return Scope(mode, None if newline_pending else levels, skip=newline_pending)

    def after_terminal(self) -> Scope:
        """A terminal was taken: a statement's continuation clause reopens it."""
        return replace(self, phase=OPEN) if self.phase == CLOSING else self

    def after_newline(self, before: int, after: int, pending_def: bool) -> Scope | None:
        """A NEWLINE at bracket depth 0 moved from ``before`` to ``after`` levels (None: refused)."""
        if self.phase == OVER:
            return None
        if self.skip:  # the cursor's own line break: the unit starts on the next line
            base = self.base if self.base is not None or self.mode in ("line", "function") else after
            return replace(self, skip=False, base=base)
        if self.mode == "line":
            return replace(self, phase=OVER)
        if self.mode == "function":
            if self.base is None:
                if pending_def and after > before:
                    return replace(self, base=after)
                return replace(self, phase=OVER) if pending_def else self
            return replace(self, phase=OVER) if after < self.base else self
        assert self.base is not None
        if after < self.base:
            return replace(self, phase=OVER)
        if self.mode == "statement" and after == self.base:
            return replace(self, phase=CLOSING)
        return replace(self, phase=OPEN)
