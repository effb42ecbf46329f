"""Where whitespace may go in the JSON a schema grammar accepts.

``"flexible"`` accepts JSON whitespace between tokens; ``"compact"`` accepts none
(``json.dumps(v, separators=(",", ":"))``); an integer ``n`` accepts exactly
``json.dumps(v, indent=n)``'s layout, which depends on the nesting depth, so the compiler keeps one
rule per depth in that mode.

Flexible whitespace is unbounded when validating (every serialisation is a valid document) and
bounded when generating, as ``json.dumps`` and pretty-printers lay JSON out: after ``{``, ``[`` and
``,`` and before ``}`` and ``]`` at most one line break and `MAX_INDENT` spaces, after ``:`` at
most one space, nothing before ``,`` and ``:`` or inside ``{}`` and ``[]``: no model can loop on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from codemask.grammar.counting import COUNTED_FROM
from codemask.grammar.ir import EMPTY, Expr, Repeat, char_class, literal, seq

_WS = Repeat(char_class([(0x20, 0x20), (0x09, 0x0A), (0x0D, 0x0D)]), 0, None)
# Spaces after a line break: ``json.dumps(indent=4)`` eight levels deep, ``indent=2`` sixteen. No more
# than `counting.COUNTED_FROM`, so that a gap stays a plain chain of states (counting rules made the first
# mask of a schema 2.5 times slower), and no more than that: every gap is a chain of this many states in
# each object rule it is inlined into.
MAX_INDENT = 32
assert MAX_INDENT <= COUNTED_FROM
_BOUNDED_WS = seq(Repeat(literal("\n"), 0, 1), Repeat(literal(" "), 0, MAX_INDENT))
MAX_INDENT_DEPTH = 64


@dataclass(frozen=True)
class Layout:
    """The whitespace policy: ``"flexible"``, ``"compact"`` or an indent width; ``bounded`` caps
    flexible gaps (generation)."""

    whitespace: str | int
    bounded: bool = False

    def __post_init__(self) -> None:
        ok = self.whitespace in ("flexible", "compact") or (
            isinstance(self.whitespace, int) and not isinstance(self.whitespace, bool) and self.whitespace >= 0)
        if not ok:
            raise ValueError(f"whitespace= is 'flexible', 'compact' or an indent width, not {self.whitespace!r}")

    @property
    def _gap(self) -> Expr:
        return _BOUNDED_WS if self.bounded else _WS

    @property
    def depth_sensitive(self) -> bool:
        return isinstance(self.whitespace, int)

    def _line(self, depth: int) -> Expr:
        assert isinstance(self.whitespace, int)
        return literal("\n" + " " * (self.whitespace * depth))

    def around(self) -> Expr:
        """Before and after the top-level value."""
        return self._gap if self.whitespace == "flexible" else EMPTY

    def open(self, depth: int) -> Expr:
        """After ``{``/``[`` of a non-empty container at ``depth``."""
        if self.whitespace == "flexible":
            return self._gap
        return EMPTY if self.whitespace == "compact" else self._line(depth + 1)

    def close(self, depth: int) -> Expr:
        """Before ``}``/``]`` of a non-empty container."""
        if self.whitespace == "flexible":
            return self._gap
        return EMPTY if self.whitespace == "compact" else self._line(depth)

    def empty(self) -> Expr:
        """Inside an empty container (``{}``, ``[]`` when generating)."""
        return _WS if self.whitespace == "flexible" and not self.bounded else EMPTY

    def comma(self, depth: int) -> Expr:
        """Between two members or items of a container at ``depth`` (after the comma only, when generating)."""
        if self.whitespace == "flexible":
            return seq(literal(","), _BOUNDED_WS) if self.bounded else seq(_WS, literal(","), _WS)
        return literal(",") if self.whitespace == "compact" else seq(literal(","), self._line(depth + 1))

    def colon(self) -> Expr:
        """Between a key and its value (``:`` or ``": "`` when generating)."""
        if self.whitespace == "flexible":
            return seq(literal(":"), Repeat(literal(" "), 0, 1)) if self.bounded else seq(_WS, literal(":"), _WS)
        return literal(":") if self.whitespace == "compact" else literal(": ")
