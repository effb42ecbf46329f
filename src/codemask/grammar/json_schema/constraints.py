"""What a conjunction of plain schema nodes asks of a value, gathered keyword by keyword.

After :mod:`~codemask.grammar.json_schema.algebra` has removed the combinators, the nodes of an
alternative only hold keywords that constrain one value, and conjunction is keyword-wise: the
tightest bound wins, lengths intersect, ``required`` lists unite, enums intersect. Object and array
keywords stay attached to their node (``additionalProperties`` means "not in *this* node's
``properties``"), so the builder can combine them key by key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from codemask.grammar.json_schema.algebra import Conjunction, allowed_types
from codemask.grammar.json_schema.nodes import Node, canonical

OBJECT_KEYWORDS = ("properties", "patternProperties", "additionalProperties", "propertyNames",
                   "unevaluatedProperties")
ARRAY_KEYWORDS = ("items", "prefixItems", "additionalItems", "x-items", "unevaluatedItems")
# The bounds `Constraints._add_numbers` reads: (keyword, whether a lower bound), per kind of bound.
INCLUSIVE_BOUNDS = (("minimum", True), ("maximum", False))
EXCLUSIVE_BOUNDS = (("exclusiveMinimum", True), ("exclusiveMaximum", False))
INTERNAL_BOUNDS = (("x-lo", True), ("x-hi", False))  # (the builder's own: [value, inclusive])
NUMBER_KEYWORDS = frozenset([keyword for bounds in (INCLUSIVE_BOUNDS, EXCLUSIVE_BOUNDS, INTERNAL_BOUNDS)
                             for keyword, _ in bounds] + ["multipleOf"])

Bound = tuple[Fraction, bool]  # value, inclusive
MAX_COUNTED = 1 << 20


@dataclass
class Constraints:
    """The keyword-wise conjunction of one alternative's nodes."""

    types: frozenset[str]
    enum: list[Any] | None = None
    not_in: list[Any] = field(default_factory=list)
    lo: Bound | None = None
    hi: Bound | None = None
    multiple_of: list[Fraction] = field(default_factory=list)
    min_length: int = 0
    max_length: int | None = None
    patterns: list[tuple[str, Node]] = field(default_factory=list)
    formats: list[tuple[str, Node]] = field(default_factory=list)
    min_items: int = 0
    max_items: int | None = None
    contains: list[tuple[Node, int, int | None]] = field(default_factory=list)
    unique_items: list[Node] = field(default_factory=list)  # the nodes that ask for uniqueItems
    array_nodes: list[Node] = field(default_factory=list)
    min_properties: int = 0
    max_properties: int | None = None
    required: list[str] = field(default_factory=list)
    required_nodes: list[Node] = field(default_factory=list)  # the node that asks for each required key
    object_nodes: list[Node] = field(default_factory=list)

    @classmethod
    def of(cls, conjunction: Conjunction) -> Constraints:
        c = cls(allowed_types(conjunction))
        for node in conjunction:
            c._add(node)
        for keyword in c._relax_large_counts():
            node = next(n for n in conjunction if keyword in n.schema)
            node.document.unsupported(keyword, node.pointer, f"a bound above {MAX_COUNTED} (dropped or lowered)")
        return c

    def _relax_large_counts(self) -> list[str]:
        """Drop length and item bounds beyond MAX_COUNTED; return the keywords relaxed.

        Bounded repetitions compile to nested counting rules (`codemask.grammar.counting`), whose
        size grows with the logarithm of the bound, so every bound up to a million is kept
        exactly; beyond that the bound is relaxed (a superset, reported as unsupported).
        """
        relaxed: list[str] = []
        if self.max_length is not None and self.max_length > MAX_COUNTED:
            self.max_length, relaxed = None, [*relaxed, "maxLength"]
        if self.min_length > MAX_COUNTED:
            self.min_length, relaxed = MAX_COUNTED, [*relaxed, "minLength"]
        if self.max_items is not None and self.max_items > MAX_COUNTED:
            self.max_items, relaxed = None, [*relaxed, "maxItems"]
        if self.min_items > MAX_COUNTED:
            self.min_items, relaxed = MAX_COUNTED, [*relaxed, "minItems"]
        return relaxed

    def _add(self, node: Node) -> None:
        schema = node.schema
        if "const" in schema:
            self._intersect_enum([schema["const"]])
        if "enum" in schema:
            self._intersect_enum(list(schema["enum"]))
        self.not_in += list(schema.get("x-not-in", []))
        if not schema.keys().isdisjoint(NUMBER_KEYWORDS):
            self._add_numbers(node)
        self.min_length = max(self.min_length, int(schema.get("minLength", 0)))
        self.max_length = _tighter(self.max_length, schema.get("maxLength"))
        if "pattern" in schema:
            self.patterns.append((schema["pattern"], node))
        if isinstance(schema.get("format"), str):
            self.formats.append((schema["format"], node))
        self.min_items = max(self.min_items, int(schema.get("minItems", 0)))
        self.max_items = _tighter(self.max_items, schema.get("maxItems"))
        if "contains" in schema:
            maximum = schema.get("maxContains")
            self.contains.append((node.child(schema["contains"], "contains"), int(schema.get("minContains", 1)),
                                  None if maximum is None else int(maximum)))
        if schema.get("uniqueItems") is True:
            self.unique_items.append(node)
        if not schema.keys().isdisjoint(ARRAY_KEYWORDS):
            self.array_nodes.append(node)
        self.min_properties = max(self.min_properties, int(schema.get("minProperties", 0)))
        self.max_properties = _tighter(self.max_properties, schema.get("maxProperties"))
        for key in schema.get("required", []):
            if key not in self.required:
                self.required.append(key)
                self.required_nodes.append(node)
        if not schema.keys().isdisjoint(OBJECT_KEYWORDS):
            self.object_nodes.append(node)

    def _intersect_enum(self, values: list[Any]) -> None:
        if self.enum is None:
            self.enum = values
            return
        keep = {canonical(v) for v in values}
        self.enum = [v for v in self.enum if canonical(v) in keep]

    def _add_numbers(self, node: Node) -> None:
        schema = node.schema
        draft4 = node.document.draft4
        for keyword, lower in INCLUSIVE_BOUNDS:
            if _is_number(schema.get(keyword)):
                flag = "exclusiveMinimum" if lower else "exclusiveMaximum"
                inclusive = not (draft4 and schema.get(flag) is True)
                self._bound(lower, _fraction(schema[keyword]), inclusive)
        for keyword, lower in EXCLUSIVE_BOUNDS:
            if _is_number(schema.get(keyword)):
                self._bound(lower, _fraction(schema[keyword]), False)
        for keyword, lower in INTERNAL_BOUNDS:
            if keyword in schema:
                value, inclusive = schema[keyword]
                self._bound(lower, _fraction(value), bool(inclusive))
        if _is_number(schema.get("multipleOf")):
            self.multiple_of.append(_fraction(schema["multipleOf"]))

    def _bound(self, lower: bool, value: Fraction, inclusive: bool) -> None:
        current = self.lo if lower else self.hi
        if current is None:
            new: Bound = (value, inclusive)
        elif current[0] == value:
            new = (value, current[1] and inclusive)
        elif (value > current[0]) == lower:
            new = (value, inclusive)
        else:
            new = current
        if lower:
            self.lo = new
        else:
            self.hi = new


def _tighter(current: int | None, value: Any) -> int | None:
    if value is None:
        return current
    return int(value) if current is None else min(current, int(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fraction(value: int | float) -> Fraction:
    """The exact decimal a JSON number spells (0.1 is 1/10, not the nearest binary float)."""
    return Fraction(value) if isinstance(value, int) else Fraction(Decimal(repr(value)))
