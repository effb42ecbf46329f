"""The grammar IR that every front-end produces and the engine compiles.

A grammar is a set of named rules; a rule's body is an expression tree over byte strings,
character classes (Unicode code points, compiled to UTF-8 byte automata by the engine), raw
byte classes, rule references, sequences, alternatives and bounded or unbounded repetition.

Front-ends (EBNF/GBNF, Lark, regex, JSON Schema) only build these nodes; they never decide how
the engine matches them. Nodes are immutable and hashable so that the optimiser can share and
deduplicate sub-expressions, and so that a grammar has a canonical text form (``to_text``) that
keys the compile cache.

Lexer mode: a grammar written for a lexer (Lark) carries ``terminals`` and ``ignore``. Its rules
then reference terminals with :class:`TerminalRef`, and the engine matches the input with the
contextual-lexer semantics of that front-end (longest match among the terminals the parser can
accept, priorities, ignored terminals between lexemes) instead of plain byte-level semantics.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeAlias, TypeVar, Union

from codemask.errors import GrammarError

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)  # UTF-16 halves: no UTF-8 text holds them
# Grammar texts nesting groups deeper than this are refused ("nesting deeper than N at line:col"):
# the front-ends, the optimiser and the automaton construction walk expressions recursively.
MAX_NESTING = 64
# The largest repetition count (`Repeat`): counters are machine integers past the front-ends.
MAX_REPEAT = 2**63 - 1


_Node = TypeVar("_Node")


def _quick_init(cls: type[_Node]) -> type[_Node]:
    """``cls`` (a frozen dataclass with slots) with an ``__init__`` that sets each slot through its
    descriptor: the dataclass's own goes through ``object.__setattr__`` per field, which made
    building expressions a tenth of a JSON Schema's front-end. Same parameters, defaults and
    ``__post_init__`` call as the dataclass's, and the same frozen instances."""
    scope: dict[str, Any] = {}
    params, lines = [], []
    for f in fields(cls):  # type: ignore[arg-type]
        if f.default_factory is not MISSING or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: a default factory or keyword-only field")
        scope[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        value = f.name if f.init else f"_default_{f.name}"
        if f.default is not MISSING:
            scope[f"_default_{f.name}"] = f.default
        if f.init:
            params.append(f.name if f.default is MISSING else f"{f.name}=_default_{f.name}")
        lines.append(f"    _set_{f.name}(self, {value})")
    if hasattr(cls, "__post_init__"):
        lines.append("    self.__post_init__()")
    exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines), scope)  # (as dataclasses makes its own)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    setattr(cls, "__init__", init)  # noqa: B010 (mypy refuses assigning a method)
    return cls


@_quick_init
@dataclass(frozen=True, slots=True)
class Literal:
    """A byte string matched exactly (UTF-8 for text)."""

    value: bytes


@_quick_init
@dataclass(frozen=True, slots=True)
class CharClass:
    """A set of Unicode code points, as sorted, disjoint, inclusive ranges.

    ``negated`` complements the set within ``[0, 0x10FFFF]`` (surrogates excluded when compiled:
    they have no UTF-8 encoding).
    """

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


@_quick_init
@dataclass(frozen=True, slots=True)
class ByteClass:
    """A set of raw byte values (0–255), as sorted, disjoint, inclusive ranges.

    Used where a grammar talks about bytes rather than characters (e.g. ``\\xFF`` in a regex over
    bytes, or "any byte" for binary-safe grammars).
    """

    ranges: tuple[tuple[int, int], ...]


@_quick_init
@dataclass(frozen=True, slots=True)
class RuleRef:
    """A reference to another rule by name."""

    name: str


@_quick_init
@dataclass(frozen=True, slots=True)
class TerminalRef:
    """A reference to a lexer terminal (lexer-mode grammars only)."""

    name: str


@_quick_init
@dataclass(frozen=True, slots=True)
class Sequence:
    """Items matched one after the other. The empty sequence matches the empty string."""

    items: tuple[Expr, ...]
    # the hash, made once (`_hash_once`)
    _hash: int | None = field(default=None, init=False, compare=False, repr=False)

    def __hash__(self) -> int:
        return _hash_once(self, self.items)


@_quick_init
@dataclass(frozen=True, slots=True)
class Choice:
    """Any one of the alternatives. The empty choice matches nothing."""

    alternatives: tuple[Expr, ...]
    _hash: int | None = field(default=None, init=False, compare=False, repr=False)  # (`_hash_once`)

    def __hash__(self) -> int:
        return _hash_once(self, self.alternatives)


def _hash_once(node: Sequence | Choice, parts: tuple[Expr, ...]) -> int:
    """The hash of a sequence or choice, kept in the node: a hash walks the whole tree below it, and
    front-ends key dicts by expressions."""
    found = node._hash
    if found is None:
        found = hash((type(node), parts))
        object.__setattr__(node, "_hash", found)
    return found


@_quick_init
@dataclass(frozen=True, slots=True)
class Repeat:
    """``item`` repeated between ``min`` and ``max`` times (``max=None``: unbounded)."""

    item: Expr
    min: int = 0
    max: int | None = None

    def __post_init__(self) -> None:
        if self.min > MAX_REPEAT or (self.max is not None and self.max > MAX_REPEAT):
            raise GrammarError(f"repetition count {max(self.min, self.max or 0)} is too large (at most {MAX_REPEAT})")


Expr: TypeAlias = Union[Literal, CharClass, ByteClass, RuleRef, TerminalRef, Sequence, Choice, Repeat]  # noqa: UP007

EMPTY: Expr = Sequence(())
NOTHING: Expr = Choice(())


@_quick_init
@dataclass(frozen=True, slots=True)
class Rule:
    """A named rule. ``lookahead`` (XGrammar's ``(= ...)``) must match what follows the rule.

    ``shared`` marks free text that many grammars hold alike (a JSON string of any characters):
    such a rule is never inlined, so the token masks inside it depend on its own body only and
    are classified once per process and vocabulary for every grammar that has it (the widest
    positions a JSON Schema grammar has: most of the vocabulary may continue a free string).

    ``standalone`` keeps a rule out of the inliner too, without sharing its masks: its positions
    are walked in a frame of their own, where free text reaches the same automaton in every
    grammar (the tail of a key that is none of an object's known keys is any string), so that
    the walks below it are shared by shape (`PositionWalker`) while the rule itself is not.
    """

    name: str
    body: Expr
    lookahead: Expr | None = None
    shared: bool = False
    standalone: bool = False


@_quick_init
@dataclass(frozen=True, slots=True)
class Terminal:
    """A lexer terminal (lexer mode): a regular expression with a priority.

    The lexer tries the candidate terminals in ``order`` (lower first; Lark sorts by priority,
    then maximal width, then pattern length, then name) and takes the first that matches, with
    its longest match. ``literal`` holds the text of terminals written as strings. ``unless``
    lists, for a regex terminal, the string terminals it *retypes* to when its match equals
    their text (Lark's keywords-versus-names rule), each with whether the string is *embedded*
    (then it is not tried on its own when this regex terminal is also a candidate).
    ``shortest`` marks a terminal whose match stops at its first possible end (a lazy regex).
    ``reserved`` marks a string terminal that is a reserved word (Python's hard keywords): a
    regex terminal that retypes to it does so wherever that regex is a candidate, not only where
    the parser could take the word (Lark retypes only among the candidates).
    """

    name: str
    body: Expr
    priority: int = 0
    literal: bytes | None = None
    order: int = 0
    unless: tuple[tuple[str, bool], ...] = ()
    shortest: bool = False
    reserved: bool = False


@dataclass(frozen=True)
class GrammarIR:
    """Rules plus the start rule, and for lexer-mode grammars the terminals and ignored ones.

    ``productive``: the front-end has already dropped the rules that derive no finite string
    (`optimize.drop_unproductive`), so the optimiser need not look again."""

    rules: dict[str, Rule]
    start: str
    terminals: dict[str, Terminal] = field(default_factory=dict)
    ignore: tuple[str, ...] = ()
    productive: bool = False

    @property
    def lexer_mode(self) -> bool:
        return bool(self.terminals)


def literal(text: str | bytes) -> Literal:
    """A literal from text (UTF-8 encoded) or raw bytes."""
    return Literal(text.encode("utf-8") if isinstance(text, str) else text)


def seq(*items: Expr) -> Expr:
    """A sequence, flattening nested sequences and fusing adjacent literals. (Written for speed: a
    JSON Schema's object states make tens of thousands; the IR's classes have no subclasses. Made
    in C where the extension is loaded: `use_builders`.)"""
    if _seq_in_c is not None:
        return _seq_in_c(items)
    return _seq(items)


def _seq(items: tuple[Expr, ...]) -> Expr:
    """`seq` in Python."""
    flat: list[Expr] = []
    for item in items:
        for part in item.items if type(item) is Sequence else (item,):
            if type(part) is not Literal:
                flat.append(part)
            elif part.value:
                if flat and type(flat[-1]) is Literal:
                    flat[-1] = Literal(flat[-1].value + part.value)
                else:
                    flat.append(part)
    return flat[0] if len(flat) == 1 else Sequence(tuple(flat))


def choice(*alternatives: Expr) -> Expr:
    """An alternation, flattening nested choices and dropping duplicates (order kept). Many
    alternatives are deduplicated by hashing (a scan of the list so far made 100,000 of them
    take minutes), a few by that scan (a hash walks a whole expression, a comparison stops at
    the first difference). Made in C where the extension is loaded (`use_builders`)."""
    if _choice_in_c is not None:
        return _choice_in_c(alternatives, SMALL_CHOICE)
    return _choice(alternatives)


def _choice(alternatives: tuple[Expr, ...]) -> Expr:
    """`choice` in Python."""
    parts = [part for alt in alternatives for part in (alt.alternatives if type(alt) is Choice else (alt,))]
    if len(parts) > SMALL_CHOICE:
        unique = tuple(dict.fromkeys(parts))
    else:
        kept: list[Expr] = []
        for part in parts:
            if part not in kept:
                kept.append(part)
        unique = tuple(kept)
    return unique[0] if len(unique) == 1 else Choice(unique)


SMALL_CHOICE = 16


def normalize_ranges(ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Sort and merge overlapping or adjacent inclusive ranges."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def complement_ranges(ranges: tuple[tuple[int, int], ...], top: int = MAX_CODE_POINT) -> tuple[tuple[int, int], ...]:
    """The ranges of ``[0, top]`` not covered by ``ranges`` (which must be normalised)."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= top:
        out.append((nxt, top))
    return tuple(out)


def char_class(ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...], negated: bool = False) -> CharClass:
    """A character class with normalised ranges."""
    return CharClass(normalize_ranges(ranges), negated)


def references(expr: Expr) -> frozenset[str]:
    """Names of the rules referenced anywhere inside ``expr``.

    Remembered during a compile, by identity (an expression is immutable): the
    optimiser and the automaton cache ask it of the same rule bodies several times each."""
    return _names(expr)[0]


def terminal_references(expr: Expr) -> frozenset[str]:
    """Names of the terminals referenced anywhere inside ``expr`` (remembered as `references`)."""
    return _names(expr)[1]


def _names(expr: Expr) -> tuple[frozenset[str], frozenset[str]]:
    """The rules and the terminals ``expr`` references: one walk for both. (The dict is read and
    written without the lock: each of those is atomic, and the optimiser asks this hundreds of
    times per compile, where taking the lock and keeping an order were most of its time.)"""
    key = id(expr)
    remembered = _REFERENCES.get(key)
    if remembered is not None and remembered[0] is expr:
        return remembered[1]
    walked = _names_in_c(expr) if _names_in_c is not None else None
    result = walked if walked is not None else _walk_names(expr)
    if len(_REFERENCES) >= REFERENCES_CACHE:
        _REFERENCES.clear()  # (full outside a compile, which clears it: forgotten at once)
    _REFERENCES[key] = (expr, result)  # (the expression is kept, so that no other one takes its id)
    return result


def _walk_names(expr: Expr) -> tuple[frozenset[str], frozenset[str]]:
    rules: set[str] = set()
    terminals: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is RuleRef:
            rules.add(node.name)  # type: ignore[union-attr]
        elif kind is TerminalRef:
            terminals.add(node.name)  # type: ignore[union-attr]
        elif kind is Sequence:
            stack.extend(node.items)  # type: ignore[union-attr]
        elif kind is Choice:
            stack.extend(node.alternatives)  # type: ignore[union-attr]
        elif kind is Repeat:
            stack.append(node.item)  # type: ignore[union-attr]
    return frozenset(rules), frozenset(terminals)


# The walk of `_names` in C: set by `codemask.engine.native` (a layer above this one), None where it
# is not in use (it returns None then too, when the C extension is switched off).
_names_in_c: Callable[[Expr], tuple[frozenset[str], frozenset[str]] | None] | None = None


def use_names_walk(walk: Callable[[Expr], tuple[frozenset[str], frozenset[str]] | None]) -> None:
    """Have `references` walk expressions with ``walk`` (the C extension's)."""
    global _names_in_c
    _names_in_c = walk


# `seq` and `choice` made in C: set by `codemask.engine.native` (None: made here).
_seq_in_c: Callable[[tuple[Expr, ...]], Expr] | None = None
_choice_in_c: Callable[[tuple[Expr, ...], int], Expr] | None = None


def use_builders(make_seq: Callable[[tuple[Expr, ...]], Expr],
                 make_choice: Callable[[tuple[Expr, ...], int], Expr]) -> None:
    """Have `seq` and `choice` made by ``make_seq`` and ``make_choice`` (the C extension's, which
    make the same nodes: front-ends call them hundreds of times per JSON Schema)."""
    global _seq_in_c, _choice_in_c
    _seq_in_c, _choice_in_c = make_seq, make_choice


# `references` of up to this many expressions are remembered (then all are forgotten).
REFERENCES_CACHE = 8192
_REFERENCES: dict[int, tuple[Expr, tuple[frozenset[str], frozenset[str]]]] = {}
_REFERENCES_LOCK = threading.Lock()


def clear_references() -> None:
    """Forget the remembered `references` (and the expressions they hold alive)."""
    with _REFERENCES_LOCK:
        _REFERENCES.clear()


_builds_remembering = 0  # blocks of `references_remembered` running now, in any thread


@contextlib.contextmanager
def references_remembered() -> Iterator[None]:
    """A block (a compile) that asks `references` of the same bodies several times: what is
    remembered meanwhile is forgotten when the last such block in the process ends. Remembering
    holds the expressions alive, and a large schema's rules are tens of thousands of objects that
    Python's garbage collector would walk in every full collection long after the compile (a
    5-7 ms pause in the middle of decoding)."""
    global _builds_remembering
    with _REFERENCES_LOCK:
        _builds_remembering += 1
    try:
        yield
    finally:
        with _REFERENCES_LOCK:
            _builds_remembering -= 1
            if not _builds_remembering:
                _REFERENCES.clear()


def to_text(expr: Expr) -> str:
    """A canonical EBNF-like rendering, used for cache keys and error messages."""
    if isinstance(expr, Literal):
        return repr(expr.value)
    if isinstance(expr, CharClass):
        body = "".join(f"{lo:x}-{hi:x}," for lo, hi in expr.ranges)
        return f"[{'^' if expr.negated else ''}{body}]"
    if isinstance(expr, ByteClass):
        return "b[" + "".join(f"{lo:x}-{hi:x}," for lo, hi in expr.ranges) + "]"
    if isinstance(expr, RuleRef):
        return expr.name
    if isinstance(expr, TerminalRef):
        return "%" + expr.name
    if isinstance(expr, Sequence):
        return "(" + " ".join(to_text(i) for i in expr.items) + ")"
    if isinstance(expr, Choice):
        return "(" + " | ".join(to_text(a) for a in expr.alternatives) + ")"
    if isinstance(expr, Repeat):
        return f"{to_text(expr.item)}{{{expr.min},{'' if expr.max is None else expr.max}}}"
    raise TypeError(f"not a grammar expression: {expr!r}")


def grammar_text(ir: GrammarIR) -> str:
    """The canonical text of a whole grammar (rules in name order, start first); the bodies' text is
    written in C where the extension is loaded (the same text: it keys the compile cache)."""
    from codemask.engine import native  # (the engine's extension; the grammar layer does not need it)

    text = native.expr_text if native.enabled() else to_text
    lines = [f"start {ir.start}"]
    for name in sorted(ir.rules):
        rule = ir.rules[name]
        look = f" (= {text(rule.lookahead)})" if rule.lookahead is not None else ""
        shared = " %shared" if rule.shared else " %standalone" if rule.standalone else ""
        lines.append(f"{name} ::= {text(rule.body)}{look}{shared}")
    for name in sorted(ir.terminals):
        term = ir.terminals[name]
        lines.append(f"%{name}.{term.priority} ::= {to_text(term.body)} lit={term.literal!r} "
                     f"order={term.order} unless={term.unless!r} shortest={term.shortest}"
                     + (" reserved" if term.reserved else ""))
    if ir.ignore:
        lines.append("%ignore " + " ".join(ir.ignore))
    return "\n".join(lines)
