"""What every part of the schema builder shares: the rules built so far, their memo, the layout.

:class:`~codemask.grammar.json_schema.builder.SchemaBuilder` is one class assembled from parts that
each build one kind of value: :mod:`.scalars` (numbers and strings), :mod:`.arrays`, :mod:`.objects`,
and values, enums and constants in :mod:`.builder`. The parts call each other through ``self`` (an
array item or an object member is any value), so this base declares the two methods every part may
ask of the assembled class, and each part's module reads, and type-checks, on its own.
"""

from __future__ import annotations

import abc
from typing import Any

from codemask.grammar.ir import Expr, RuleRef, seq
from codemask.grammar.json_schema.algebra import Conjunction
from codemask.grammar.json_schema.layout import Layout
from codemask.grammar.json_schema.nodes import Document


class BuilderBase(abc.ABC):
    """The state of one schema document's rules, shared by the builder's parts."""

    def __init__(self, layout: Layout, document: Document, generating: bool = False) -> None:
        self.layout = layout
        self.document = document
        self.where = ""  # the pointer of the value being built, for reports outside a node's keywords
        self.generating = generating  # mode="generate": keys once, in schema order; objects closed
        self.rules: dict[str, Expr] = {}
        self.shared: set[str] = set()  # the rules that are free text (`Rule.shared`)
        self.standalone: set[str] = set()  # the rules kept out of the inliner (`Rule.standalone`)
        self._memo: dict[tuple[Any, ...], str] = {}
        self._keep_alive: list[Conjunction] = []  # memo keys hold ids: keep their nodes alive
        # key complements below a trie node, by the rules that end their branches, then the node's suffixes
        self._key_tries: dict[tuple[Expr, Expr], dict[tuple[str, ...], Expr]] = {}
        self._intersections: dict[tuple[Expr, ...], Expr] = {}  # string intersections' start rules, by operands

    @abc.abstractmethod
    def value(self, nodes: Conjunction, depth: int) -> Expr:
        """A reference to the rule for values satisfying every node (built on first use)."""

    @abc.abstractmethod
    def literal_value(self, value: Any, depth: int) -> Expr:
        """Every spelling of one JSON value (any key order and escapes; ``1`` also as ``1.0``)."""

    def _named(self, prefix: str, expr: Expr) -> RuleRef:
        """One rule per distinct expression: object states and values then refer to it by name.

        Keeping members, strings and numbers as rules keeps every rule's automaton small (the
        engine builds one automaton per rule) and lets identical pieces share one.
        """
        key = ("expr", expr)
        name = self._memo.get(key)
        if name is None:
            name = self._memo[key] = f"{prefix}{len(self._memo)}"
            self.rules[name] = expr
        return RuleRef(name)


def joined(items: list[Expr], separator: Expr) -> Expr:
    """``items`` in order, ``separator`` between each two (array items, object members)."""
    body: list[Expr] = [items[0]]
    for item in items[1:]:
        body += [separator, item]
    return seq(*body)
