"""The grammar-unit sequence of code: its statements in source order, from tree-sitter, kept up to date as text arrives.

RPG (Dong et al., ACL 2025) sees a loop as a repeat in the sequence of grammar rules the code
derives at statement level: ``assert_statement, assert_statement, …`` or ``elif_clause,
expression_statement, elif_clause, expression_statement, …``. A *unit* is one statement node —
simple (``return``, ``assert``, an expression statement) or compound (``for``, ``if``, a function
definition, and their clauses ``elif``/``else``/``except``) — or a comment, in pre-order (a compound
statement before the statements of its body), labelled by its node type. Expression statements are
labelled with the kind of expression too (``expression_statement:assignment`` vs ``:call``), since
that is the rule one level down and the structure a reader sees. A unit that defines a name (a
function or class; in Go a function or method) also carries that name and its *scope* (where its
parent block starts), so that RPG can see a definition written again under a name its block
already defines: dead code, the first definition replaced.

Parsing is tree-sitter's: it tolerates partial code (an unfinished line becomes an ERROR node
and the statements before it stay intact) and reparses incrementally after an edit.
:class:`StatementUnits` also avoids re-walking the whole tree per step: units that start before a
*frontier* (the line before the last unit's line) are kept from earlier walks, and each walk
descends only into nodes that extend past the frontier — the chain of enclosing statements and the
last line or two. Tests compare it with :func:`statement_units` on a fresh parse at every step.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import Any

import tree_sitter

_PYTHON_STATEMENTS = (
    # simple statements (tree-sitter-python's _simple_statement)
    "expression_statement", "return_statement", "pass_statement", "break_statement", "continue_statement",
    "raise_statement", "assert_statement", "import_statement", "import_from_statement", "future_import_statement",
    "global_statement", "nonlocal_statement", "delete_statement", "print_statement", "exec_statement",
    "type_alias_statement",
    # compound statements (_compound_statement) and their clauses
    "if_statement", "elif_clause", "else_clause", "for_statement", "while_statement", "try_statement",
    "except_clause", "finally_clause", "with_statement", "function_definition", "class_definition",
    "decorated_definition", "match_statement", "case_clause",
    "comment",
)
_GO_STATEMENTS = (
    # tree-sitter-go's _statement and _simple_statement
    "expression_statement", "send_statement", "inc_statement", "dec_statement", "assignment_statement",
    "short_var_declaration", "return_statement", "go_statement", "defer_statement", "if_statement",
    "for_statement", "expression_switch_statement", "type_switch_statement", "select_statement",
    "labeled_statement", "fallthrough_statement", "break_statement", "continue_statement", "goto_statement",
    "empty_statement", "var_declaration", "const_declaration", "type_declaration",
    # clauses and top-level declarations
    "expression_case", "type_case", "default_case", "communication_case", "package_clause", "import_declaration",
    "function_declaration", "method_declaration",
    "comment",
)


@dataclass(frozen=True)
class LanguageSpec:
    """Which tree-sitter grammar a language uses and which of its node kinds are statement-level units."""

    name: str
    module: str
    unit_kinds: frozenset[str]
    refined_kinds: frozenset[str]  # labelled with the kind of their first named child too
    definition_kinds: frozenset[str] = frozenset()  # units that bind the name in their "name" field
    redefinable_names: frozenset[str] = frozenset()  # names a scope may define more than once


LANGUAGES: dict[str, LanguageSpec] = {
    "python": LanguageSpec("python", "tree_sitter_python", frozenset(_PYTHON_STATEMENTS),
                           frozenset({"expression_statement"}),
                           definition_kinds=frozenset({"function_definition", "class_definition"})),
    "go": LanguageSpec("go", "tree_sitter_go", frozenset(_GO_STATEMENTS), frozenset({"expression_statement"}),
                       definition_kinds=frozenset({"function_declaration", "method_declaration"}),
                       redefinable_names=frozenset({"init"})),  # a package may have several init functions
}


@dataclass(frozen=True)
class Unit:
    """One statement-level unit: its label (node kind, refined) and the byte where it starts; for a
    definition, the name it binds and its scope (the start byte of the block that holds it)."""

    label: str
    start: int
    name: str | None = None
    scope: int = -1


def language_spec(name: str) -> LanguageSpec:
    """The spec of a supported language; a clear error for any other."""
    try:
        return LANGUAGES[name]
    except KeyError:
        raise ValueError(f"RPG has no statement units for {name!r}; supported: {', '.join(LANGUAGES)}") from None


@cache
def ts_language(name: str) -> tree_sitter.Language:
    """The tree-sitter ``Language`` of ``name`` (from its PyPI wheel, e.g. ``tree-sitter-python``)."""
    spec = language_spec(name)
    try:
        module: Any = importlib.import_module(spec.module)
    except ImportError as exc:
        wheel = spec.module.replace("_", "-")
        raise ImportError(f"RPG for {name} needs the {wheel} package: pip install {wheel}") from exc
    return tree_sitter.Language(module.language())


def _label(node: tree_sitter.Node, spec: LanguageSpec) -> str:
    if node.type in spec.refined_kinds and node.named_child_count:
        child = node.named_children[0]
        return f"{node.type}:{child.type}"
    return node.type


def _unit(node: tree_sitter.Node, spec: LanguageSpec) -> Unit:
    name, scope = _defined_name(node, spec), -1
    if name is not None and node.parent is not None:
        scope = node.parent.start_byte
    return Unit(_label(node, spec), node.start_byte, name, scope)


def _defined_name(node: tree_sitter.Node, spec: LanguageSpec) -> str | None:
    """The name a definition binds in its block; None for other units and for definitions a block may
    repeat: decorated ones (``@overload``, a property's setter) and the language's redefinable names."""
    decorated = node.parent is not None and node.parent.type == "decorated_definition"
    if node.type not in spec.definition_kinds or decorated:
        return None
    name = node.child_by_field_name("name")
    if name is None or name.text is None or name.text.decode() in spec.redefinable_names:
        return None
    receiver = node.child_by_field_name("receiver")  # a Go method: its receiver's type is part of its name
    if receiver is not None:
        types = [d.child_by_field_name("type") for d in receiver.named_children]
        return "".join(t.text.decode() for t in types if t is not None and t.text) + "." + name.text.decode()
    return name.text.decode()


def statement_units(source: bytes | str, language: str = "python") -> list[Unit]:
    """All units of ``source`` from a fresh parse and a full walk (the reference for the incremental form)."""
    data = source.encode("utf-8") if isinstance(source, str) else source
    spec = language_spec(language)
    tree = tree_sitter.Parser(ts_language(language)).parse(data)
    units: list[Unit] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type in spec.unit_kinds:
            units.append(_unit(node, spec))
        stack.extend(reversed(node.children))
    return units


class StatementUnits:
    """The units of a text that grows (and is sometimes cut back), parsed incrementally.

    ``append``/``truncate`` edit the text and the tree; ``refresh`` reparses and re-walks the tail
    when something changed. After a refresh, ``units`` lists every unit in source order,
    ``code_end`` is the byte where the last statement ends (-1 if none), and ``complete`` says
    whether the code so far parses without error or empty bodies — whether it could end here.
    """

    def __init__(self, language: str = "python") -> None:
        self.spec = language_spec(language)
        self._parser = tree_sitter.Parser(ts_language(language))
        self._text = bytearray()
        self._point = (0, 0)  # (row, column in bytes) of the end of the text
        self._tree = self._parser.parse(b"")
        self._dirty = False
        self._frozen: list[Unit] = []  # the units that start before the frontier
        self._frontier = 0
        self.units: list[Unit] = []
        self.code_end = -1
        self.complete = True

    @property
    def text(self) -> bytearray:
        """The text so far: the live buffer, to read and not to change."""
        return self._text

    def append(self, data: bytes) -> None:
        if not data:
            return
        start, start_point = len(self._text), self._point
        self._text += data
        self._point = _advance(start_point, data)
        self._tree.edit(start_byte=start, old_end_byte=start, new_end_byte=len(self._text),
                        start_point=start_point, old_end_point=start_point, new_end_point=self._point)
        self._dirty = True

    def truncate(self, length: int) -> None:
        """Cut the text back to its first ``length`` bytes."""
        if not 0 <= length <= len(self._text):
            raise ValueError(f"cannot truncate {len(self._text)} bytes to {length}")
        if length == len(self._text):
            return
        old_end, old_point = len(self._text), self._point
        del self._text[length:]
        self._point = _advance((0, 0), bytes(self._text))
        self._tree.edit(start_byte=length, old_end_byte=old_end, new_end_byte=length,
                        start_point=self._point, old_end_point=old_point, new_end_point=self._point)
        self._frontier = min(self._frontier, line_start(self._text, line_start(self._text, length) - 1))
        self._frozen = [u for u in self._frozen if u.start < self._frontier]
        self._dirty = True

    def refresh(self) -> None:
        """Reparse (incrementally) and update ``units``, ``code_end`` and ``complete``."""
        if not self._dirty:
            return
        tree = self._parser.parse(bytes(self._text), self._tree)
        changed = [r.start_byte for r in self._tree.changed_ranges(tree)]
        self._tree = tree
        self._dirty = False
        if changed and min(changed) < self._frontier:  # error recovery re-read earlier code: walk it again
            self._frontier = line_start(self._text, min(changed))
            self._frozen = [u for u in self._frozen if u.start < self._frontier]
        walk = _TailWalk(self.spec, self._frontier)
        walk.visit(self._tree.walk())
        self.units = self._frozen + walk.units
        self.code_end = walk.code_end
        self.complete = not self._tree.root_node.has_error and not walk.hollow
        self._advance_frontier()

    def docstring(self, unit: Unit) -> str | None:
        """The docstring of the definition ``unit`` (after a refresh): the text of the string its body begins
        with, between its quotes, as written; None if the body begins with anything else or ``unit`` is no
        definition."""
        if unit.name is None:
            return None
        node = self._tree.root_node.descendant_for_byte_range(unit.start, unit.start)
        while node is not None and not (node.type in self.spec.definition_kinds and node.start_byte == unit.start):
            node = node.parent
        body = node.child_by_field_name("body") if node is not None else None
        first = body.named_children[0] if body is not None and body.named_child_count else None
        if first is None or first.type != "expression_statement" or first.named_child_count != 1:
            return None
        string = first.named_children[0]
        if string.type != "string" or string.has_error or string.child_count < 2:
            return None
        opening, closing = string.children[0], string.children[-1]
        prefix = bytes(self._text[opening.start_byte: opening.end_byte]).rstrip(b"'\"").lower()
        if b"f" in prefix or b"b" in prefix:
            return None  # an f-string or bytes is no docstring
        return bytes(self._text[opening.end_byte: closing.start_byte]).decode("utf-8", errors="replace")

    def fork(self) -> StatementUnits:
        other = StatementUnits.__new__(StatementUnits)
        other.spec = self.spec
        other._parser = tree_sitter.Parser(self._parser.language)
        other._text = bytearray(self._text)
        other._point = self._point
        other._tree = self._tree.copy()
        other._dirty = self._dirty
        other._frozen = list(self._frozen)
        other._frontier = self._frontier
        other.units = list(self.units)
        other.code_end = self.code_end
        other.complete = self.complete
        return other

    def _advance_frontier(self) -> None:
        """Freeze the units before the line that precedes the last unit's line (they no longer change)."""
        if not self.units:
            return
        frontier = line_start(self._text, line_start(self._text, self.units[-1].start) - 1)
        if frontier > self._frontier:
            self._frontier = frontier
            self._frozen = [u for u in self.units if u.start < frontier]


class _TailWalk:
    """Pre-order walk of the nodes that extend past ``frontier``, collecting units that start at or after it."""

    def __init__(self, spec: LanguageSpec, frontier: int) -> None:
        self.spec = spec
        self.frontier = frontier
        self.units: list[Unit] = []
        self.code_end = -1
        self.hollow = False  # a zero-width node in the tail: a compound statement with no body yet

    def visit(self, cursor: tree_sitter.TreeCursor) -> None:
        node = cursor.node
        assert node is not None
        if node.type in self.spec.unit_kinds:
            self.code_end = max(self.code_end, node.end_byte)
            if node.start_byte >= self.frontier:
                self.units.append(_unit(node, self.spec))
        elif node.is_named and node.start_byte == node.end_byte and node.start_byte >= self.frontier:
            self.hollow = True
        if not cursor.goto_first_child():
            return
        while True:  # (tree-sitter's goto_first_child_for_byte misses children behind hidden nodes in Go)
            child = cursor.node
            if child is not None and child.end_byte > self.frontier:
                self.visit(cursor)
            if not cursor.goto_next_sibling():
                break
        cursor.goto_parent()


def _advance(point: tuple[int, int], data: bytes) -> tuple[int, int]:
    newlines = data.count(b"\n")
    if not newlines:
        return point[0], point[1] + len(data)
    return point[0] + newlines, len(data) - data.rfind(b"\n") - 1


def line_start(text: bytes | bytearray, at: int) -> int:
    """The offset of the first byte of the line holding byte ``at`` (0 for ``at <= 0``)."""
    if at <= 0:
        return 0
    return text.rfind(b"\n", 0, at) + 1
