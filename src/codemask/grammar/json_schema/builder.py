"""Schema → grammar rules: one rule per distinct conjunction of subschemas (and depth, when indenting).

The builder memoises on the *set* of nodes a value must satisfy, so a ``$ref`` used in many places
is one rule, and a recursive reference meets its own rule name instead of unrolling. Each rule is
the union of its alternatives (:func:`~codemask.grammar.json_schema.algebra.distribute`), and each
alternative the union of the types it allows, each type compiled from the keyword-wise
:class:`~codemask.grammar.json_schema.constraints.Constraints`.

This module holds the values themselves: the memo, the alternatives and types of each value, and
enums and constants in every spelling JSON allows. Each type has its own module: :mod:`.scalars`
(numbers and strings), :mod:`.arrays` and :mod:`.objects`, on the state they share (:mod:`.base`).
"""

from __future__ import annotations

import itertools
from typing import Any

from codemask.grammar.ir import EMPTY, NOTHING, Expr, Repeat, RuleRef, choice, literal, seq
from codemask.grammar.json_schema import numbers, strings
from codemask.grammar.json_schema.algebra import Conjunction, distribute
from codemask.grammar.json_schema.arrays import ArrayRules
from codemask.grammar.json_schema.base import joined
from codemask.grammar.json_schema.constraints import Constraints
from codemask.grammar.json_schema.layout import MAX_INDENT_DEPTH
from codemask.grammar.json_schema.nodes import canonical, json_type
from codemask.grammar.json_schema.objects import ObjectRules
from codemask.grammar.json_schema.satisfies import value_check
from codemask.grammar.json_schema.scalars import split_at

MAX_ANY_ORDER_MEMBERS = 10  # an object constant's members in any order: a rule per subset
TYPE_ORDER = ("object", "array", "string", "integer", "fraction", "boolean", "null")


class SchemaBuilder(ArrayRules, ObjectRules):
    """Builds the rules of one schema document."""

    # -- values ------------------------------------------------------------------------------

    def value(self, nodes: Conjunction, depth: int) -> Expr:
        """A reference to the rule for values satisfying every node (built on first use)."""
        if self.layout.depth_sensitive and depth > MAX_INDENT_DEPTH:
            return NOTHING
        key = (tuple(sorted(n.identity for n in nodes)), depth if self.layout.depth_sensitive else 0)
        name = self._memo.get(key)
        if name is None:
            name = f"v{len(self._memo)}"
            self._memo[key] = name
            self._keep_alive.append(nodes)
            self.rules[name] = NOTHING
            self.rules[name] = choice(*(self._alternative(conj, depth) for conj in distribute(nodes)))
        return RuleRef(name)

    def _alternative(self, conj: Conjunction, depth: int) -> Expr:
        c = Constraints.of(conj)
        if c.enum is not None:
            return self._enum(c, conj, depth)
        parts = []
        types = c.types
        for kind in TYPE_ORDER:
            if kind not in types:
                continue
            if kind == "fraction" and "integer" in types:
                kind = "number"
            parts.append(self._typed(kind, c, conj, depth))
        return choice(*parts)

    def _typed(self, kind: str, c: Constraints, conj: Conjunction, depth: int) -> Expr:
        excluded = [v for v in c.not_in if _type_matches(v, kind)]
        if kind == "null":
            return NOTHING if excluded else literal("null")
        if kind == "boolean":
            return choice(*(literal(t) for t in ("true", "false") if (t == "true") not in excluded))
        if kind == "string":
            return self._string(c, conj, excluded)
        if kind in ("integer", "number", "fraction"):
            number = choice(*(self._number(kind, piece, conj) for piece in split_at(c, excluded)))
            return self._named("n", numbers.bounded_for_writing(number) if self.generating else number)
        if excluded:
            conj[0].document.unsupported("not", conj[0].pointer, f"excluding particular {kind}s")
        if kind == "array":
            return self._array(c, conj, depth)
        return self._object(c, conj, depth)

    # -- enum and const ----------------------------------------------------------------------

    def _enum(self, c: Constraints, conj: Conjunction, depth: int) -> Expr:
        self.where = conj[0].pointer if conj else ""
        excluded = {canonical(v) for v in c.not_in}
        checks = [check for node in conj if (check := value_check(node)) is not None]
        values = [v for v in c.enum or [] if json_type(v) in c.types and canonical(v) not in excluded
                  and all(check(v) for check in checks)]
        return choice(*(self.literal_value(v, depth) for v in values))

    def literal_value(self, value: Any, depth: int) -> Expr:
        """Every spelling of one JSON value (any key order and escapes; ``1`` also as ``1.0``)."""
        if value is None or isinstance(value, bool):
            return literal(_scalar_text(value))
        if isinstance(value, (int, float)):
            return numbers.bounded_for_writing(_number_literal(value)) if self.generating else _number_literal(value)
        if isinstance(value, str):
            return strings.string_literal(value)
        lay = self.layout
        if isinstance(value, list):
            if not value:
                return seq(literal("["), lay.empty(), literal("]"))
            items = [self.literal_value(v, depth + 1) for v in value]
            return seq(literal("["), lay.open(depth), joined(items, lay.comma(depth)), lay.close(depth), literal("]"))
        members = [seq(strings.string_literal(k), lay.colon(), self.literal_value(v, depth + 1))
                   for k, v in value.items()]
        if not members:
            return seq(literal("{"), lay.empty(), literal("}"))
        if self.generating:  # the members in the constant's own order
            body = joined(members, lay.comma(depth))
            return seq(literal("{"), lay.open(depth), body, lay.close(depth), literal("}"))
        return self._any_order(members, depth)

    def _any_order(self, members: list[Expr], depth: int) -> Expr:
        """An object holding each member exactly once, in any order.

        Up to 5 members every permutation is spelled; up to `MAX_ANY_ORDER_MEMBERS` a rule per
        subset of the members seen; beyond that any sequence of that many members is accepted (a
        superset that may repeat one member in place of another, reported as unsupported).
        """
        lay = self.layout
        if len(members) <= 5:
            body = choice(*(joined(list(order), lay.comma(depth)) for order in itertools.permutations(members)))
        elif len(members) <= MAX_ANY_ORDER_MEMBERS:
            base = f"a{len(self.rules)}_"
            full = (1 << len(members)) - 1
            self.rules[f"{base}{full}"] = EMPTY
            for seen in range(full - 1, 0, -1):
                self.rules[f"{base}{seen}"] = choice(*(seq(lay.comma(depth), member, RuleRef(f"{base}{seen | 1 << j}"))
                                                       for j, member in enumerate(members) if not seen >> j & 1))
            body = choice(*(seq(member, RuleRef(f"{base}{1 << j}")) for j, member in enumerate(members)))
        else:
            self.document.unsupported("const", self.where, f"an object constant of {len(members)} members in any order")
            anyone = choice(*members)
            body = seq(anyone, Repeat(seq(lay.comma(depth), anyone), len(members) - 1, len(members) - 1))
        return seq(literal("{"), lay.open(depth), body, lay.close(depth), literal("}"))


def _type_matches(value: Any, kind: str) -> bool:
    t = json_type(value)
    return t == kind or (kind == "number" and t in ("integer", "fraction"))


def _scalar_text(value: Any) -> str:
    return "null" if value is None else ("true" if value else "false")


def _number_literal(value: int | float) -> Expr:
    """A number and its equal spellings: ``5``, ``5.0``, ``5.00``; ``-0`` for 0; ``0.50`` for 0.5."""
    if isinstance(value, int) or value.is_integer():
        n = int(value)
        spelled = numbers.integer_valued(literal(str(n)))
        return choice(spelled, numbers.integer_valued(literal("-0"))) if n == 0 else spelled
    from decimal import Decimal

    text = format(Decimal(repr(value)), "f")
    return choice(seq(literal(text), Repeat(literal("0"), 0, None)), literal(repr(value)))
