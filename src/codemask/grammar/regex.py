"""The regex front-end: Python ``re`` patterns to grammar expressions.

A pattern becomes an expression that matches exactly the strings ``re.fullmatch`` accepts
(``regex_to_expr(p)``), or, with ``search=True``, the strings in which ``re.search`` finds a match
(JSON Schema ``pattern`` is search semantics).

How it is built, and why:

- **Reading the pattern** is :mod:`codemask.grammar.regex_syntax`: ``re`` judges what is valid,
  and a parser that follows ``re``'s reading rules gives a syntax tree with positions, whose
  single-character items are already sets of code points (:mod:`codemask.grammar.regex_charsets`,
  computed by ``re`` itself so they cannot drift from Python's behaviour).
- **Converting** the tree to the IR is this module. Each item needs to know only whether an end
  of the string is open; anchors, atomic groups and possessive quantifiers also look at the
  characters around them.
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
import sys
from collections.abc import Callable
from dataclasses import dataclass

from codemask.grammar.ir import (
    EMPTY,
    NOTHING,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    char_class,
    choice,
    literal,
    normalize_ranges,
    seq,
)
from codemask.grammar.regex_charsets import EVERYTHING, NEWLINE, Ranges, complement, intersects, union, word_chars
from codemask.grammar.regex_syntax import (
    Alt,
    Anchor,
    Atomic,
    Node,
    Parser,
    Rep,
    Seq,
    Set,
    UnsupportedRegexError,
    validate,
)

__all__ = ["UnsupportedRegexError", "regex_grammar", "regex_to_expr"]


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
    global_flags = validate(pattern, flags)
    tree = Parser(pattern, global_flags).parse()
    side = _OPEN if search else _EDGE
    return _Converter(pattern).convert(tree, side, side)



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
        if not other.chars or other.chars == self.chars or self.chars == EVERYTHING:
            chars = self.chars
        elif not self.chars or other.chars == EVERYTHING:
            chars = other.chars
        else:
            chars = union(self.chars, other.chars)
        return _Side(chars=chars, edge=self.edge or other.edge)


_EDGE = _Side(edge=True)
_OPEN = _Side(open=True)
_UNKNOWN = _Side(chars=EVERYTHING, edge=True)
_ANY_STAR: Expr = Repeat(char_class(EVERYTHING), 0, None)


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

    def _sensitive(self, node: Node) -> bool:
        """Whether ``node`` contains an anchor, an atomic group or a possessive quantifier."""
        key = id(node)
        if key not in self._sensitivity:
            if isinstance(node, (Anchor, Atomic)) or (isinstance(node, Rep) and node.possessive):
                found = True
            elif isinstance(node, Seq):
                found = any(self._sensitive(item) for item in node.items)
            elif isinstance(node, Alt):
                found = any(self._sensitive(alt) for alt in node.alternatives)
            elif isinstance(node, Rep):
                found = self._sensitive(node.item)
            else:
                found = False
            self._sensitivity[key] = found
        return self._sensitivity[key]

    def convert(self, node: Node, left: _Side, right: _Side) -> Expr:
        if isinstance(node, Set):
            return self._open_ends(_set_expr(node.ranges), left, right)
        if isinstance(node, Alt):
            return choice(*(self.convert(alt, left, right) for alt in node.alternatives))
        if isinstance(node, Seq):
            return self._sequence(node.items, left, right)
        if isinstance(node, Anchor):
            return self._sequence((node,), left, right)
        if isinstance(node, Rep):
            return self._repeat(node, left, right)
        self._check_atomic(node.item, right, node.pos, "atomic group (?>...)")
        return self.convert(node.item, left, right)

    # -- sequences and their anchors --------------------------------------------------------

    def _sequence(self, items: tuple[Node, ...], left: _Side, right: _Side) -> Expr:
        consuming = [i for i, item in enumerate(items) if not isinstance(item, Anchor)]
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
            if not isinstance(item, Anchor) and not self._sensitive(item):
                # Only anchors, atomic groups and possessive quantifiers look at their
                # neighbours; anything else only needs to know about an open end.
                parts.append(self.convert(item, left if index == first else _UNKNOWN,
                                          right if index == last else _UNKNOWN))
                index += 1
                continue
            before = left if index == first else self._side_before(items, index, left)
            if isinstance(item, Anchor):  # anchors between two characters
                run_end = index
                while isinstance(items[run_end], Anchor):
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

    def _side_before(self, items: tuple[Node, ...], index: int, start: _Side) -> _Side:
        """What may precede ``items[index]``: last characters of earlier items, then ``start``."""
        side = _Side()
        for item in reversed(items[:index]):
            chars, nullable = _edge_chars(item, last=True)
            side = side | _Side(chars=chars)
            if not nullable:
                return side
        return side | start

    def _side_after(self, items: tuple[Node, ...], index: int, end: _Side) -> _Side:
        """What may follow ``items[index - 1]``: first characters of later items, then ``end``."""
        side = _Side()
        for item in items[index:]:
            chars, nullable = _edge_chars(item, last=False)
            side = side | _Side(chars=chars)
            if not nullable:
                return side
        return side | end

    def _cluster(self, anchors: tuple[Anchor, ...], left: _Side, right: _Side) -> tuple[Expr, _Side, _Side]:
        """Anchors between the same two characters; returns the expression they become (empty,
        nothing, or the free prefix/suffix of a search) and what then lies on each side."""
        ascii_modes = {a.ascii_only for a in anchors if a.kind in "bB"}
        if len(ascii_modes) > 1:
            raise UnsupportedRegexError("\\b or \\B under different ASCII flags at one position",
                                        self.pattern, anchors[0].pos)
        # Only \b and \B tell word characters from others; the rest treat them alike.
        word = word_chars(ascii_modes.pop()) if ascii_modes else ()

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

    def _undecided(self, anchors: tuple[Anchor, ...], word: Ranges, left: _Side,
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

    def _repeat(self, node: Rep, left: _Side, right: _Side) -> Expr:
        if node.possessive:
            self._check_atomic(node, right, node.pos, "possessive quantifier")
        if node.max == 0:
            return self._sequence((), left, right)
        if node.min == 1 and node.max == 1:
            return self.convert(node.item, left, right)
        if node.max == 1:
            return self.convert(Alt((Seq(()), node.item)), left, right)
        last_chars, _ = _edge_chars(node.item, last=True)
        first_chars, _ = _edge_chars(node.item, last=False)
        inner_left = _UNKNOWN if left.open else left | _Side(chars=last_chars)
        inner_right = _UNKNOWN if right.open else right | _Side(chars=first_chars)
        body = Repeat(self.convert(node.item, inner_left, inner_right), node.min, node.max)
        return self._open_ends(body, left, right)

    def _check_atomic(self, body: Node, right: _Side, pos: int, what: str) -> None:
        """Atomic matching (``(?>...)``, ``*+``) equals ordinary matching when nothing follows in a
        search, or for a run of one character class that what follows cannot start with."""
        if right.open:
            return
        run = _single_class_run(body)
        if run is not None and not intersects(run, right.chars):
            return
        raise UnsupportedRegexError(f"{what} cannot be matched by a grammar here: what follows may start with "
                                    "a character it would have to give back", self.pattern, pos)

    @staticmethod
    def _open_ends(expr: Expr, left: _Side, right: _Side) -> Expr:
        return seq(_ANY_STAR if left.open else EMPTY, expr, _ANY_STAR if right.open else EMPTY)


def _anchors(items: tuple[Node, ...]) -> tuple[Anchor, ...]:
    anchors = tuple(item for item in items if isinstance(item, Anchor))
    assert len(anchors) == len(items)
    return anchors


def _single_class_run(node: Node) -> Ranges | None:
    """The class of ``node`` if it is one character class, or one greedy repetition of one: then
    its first match is its longest, and atomic matching only refuses what could never fit."""
    while isinstance(node, Atomic):
        node = node.item
    if isinstance(node, Rep) and not node.lazy:
        node = node.item
        while isinstance(node, Atomic):
            node = node.item
    return node.ranges if isinstance(node, Set) else None


def _set_expr(ranges: Ranges) -> Expr:
    if not ranges:
        return NOTHING
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return literal(chr(ranges[0][0]))
    return char_class(ranges)


def _edge_chars(node: Node, last: bool) -> tuple[Ranges, bool]:
    """The characters ``node`` can start (or end, if ``last``) with, and whether it can be empty."""
    if isinstance(node, Set):
        return node.ranges, False
    if isinstance(node, Anchor):
        return (), True
    if isinstance(node, Alt):
        found = [_edge_chars(alt, last) for alt in node.alternatives]
        return normalize_ranges(tuple(r for chars, _ in found for r in chars)), any(n for _, n in found)
    if isinstance(node, Seq):
        chars: Ranges = ()
        for item in reversed(node.items) if last else node.items:
            item_chars, nullable = _edge_chars(item, last)
            chars = union(chars, item_chars)
            if not nullable:
                return chars, False
        return chars, True
    if isinstance(node, Rep):
        if node.max == 0:
            return (), True
        chars, nullable = _edge_chars(node.item, last)
        return chars, nullable or node.min == 0
    return _edge_chars(node.item, last)


def _other_chars(word: Ranges) -> Ranges:
    return complement(union(word, NEWLINE))


def _left_states(side: _Side, word: Ranges) -> list[str]:
    states = [_L_START] if side.edge else []
    if intersects(side.chars, NEWLINE):
        states.append(_L_NEWLINE)
    if intersects(side.chars, word):
        states.append(_L_WORD)
    if intersects(side.chars, _other_chars(word)):
        states.append(_L_OTHER)
    return states


def _right_states(side: _Side, word: Ranges) -> list[str]:
    states = [_R_END] if side.edge else []
    if intersects(side.chars, NEWLINE):
        states += [_R_FINAL_NEWLINE, _R_NEWLINE]
    if intersects(side.chars, word):
        states.append(_R_WORD)
    if intersects(side.chars, _other_chars(word)):
        states.append(_R_OTHER)
    return states


def _state_chars(state: str, word: Ranges) -> Ranges:
    if state in (_L_NEWLINE, _R_FINAL_NEWLINE, _R_NEWLINE):
        return NEWLINE
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
        return seq(literal("\n"), char_class(EVERYTHING), _ANY_STAR)
    if not _state_chars(state, word):
        return NOTHING
    return seq(_set_expr(_state_chars(state, word)), _ANY_STAR)


def _free_end(chosen: frozenset[str], every: tuple[str, ...], build: Callable[[str], Expr]) -> Expr:
    """The free prefix (or suffix) of a search that ends in one of the ``chosen`` states."""
    if len(chosen) == len(every):
        return _ANY_STAR
    return choice(*(build(state) for state in every if state in chosen)) if chosen else NOTHING
