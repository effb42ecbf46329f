"""Schema → grammar rules: one rule per distinct conjunction of subschemas (and depth, when indenting).

The builder memoises on the *set* of nodes a value must satisfy, so a ``$ref`` used in many places
is one rule, and a recursive reference meets its own rule name instead of unrolling. Each rule is
the union of its alternatives (:func:`~codemask.grammar.json_schema.algebra.distribute`), and each
alternative the union of the types it allows, each type compiled from the keyword-wise
:class:`~codemask.grammar.json_schema.constraints.Constraints`.

Objects accept their members **in any order** (schema order is not a JSON Schema constraint, and
models write keys in the order they think of them). Required keys are tracked exactly as a set
while there are few of them (a state per subset seen, times a member count when ``min``/
``maxProperties`` ask); with many, they must appear in schema order. Known keys may repeat, which
JSON allows and validators read as the last value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from codemask.errors import GrammarSyntaxError, UnsupportedSchemaError
from codemask.grammar.ir import (
    EMPTY,
    MAX_CODE_POINT,
    NOTHING,
    Expr,
    Repeat,
    RuleRef,
    char_class,
    choice,
    literal,
    seq,
)
from codemask.grammar.json_schema import numbers, regular, strings
from codemask.grammar.json_schema.algebra import Conjunction, distribute, flatten
from codemask.grammar.json_schema.constraints import Constraints
from codemask.grammar.json_schema.layout import MAX_INDENT_DEPTH, Layout
from codemask.grammar.json_schema.nodes import ANNOTATIONS, Document, Node, canonical, json_type
from codemask.grammar.regex import UnsupportedRegexError

MAX_REQUIRED_SET = 6
MAX_OBJECT_STATES = 256
MAX_OBJECT_ALTERNATIVES = 8192  # validation's required-key subsets times members
MAX_OBJECT_RULES = 20000  # generation's ordered object states
MAX_UNIQUE_VALUES = 256  # uniqueItems over a finite set, written in its order
MAX_UNIQUE_ANY_ORDER = 8  # ... accepted in any order: a state per subset
MAX_UNIQUE_TUPLES = 512  # uniqueItems on a closed tuple: arrays spelled out
MAX_ANY_ORDER_MEMBERS = 10  # an object constant's members in any order: a rule per subset
MAX_ENUMERATED_MULTIPLES = 256
MAX_MODULUS = 1000  # a divisibility automaton has one rule per remainder
MAX_INTERSECTED_LENGTH = 256  # length bounds kept in a product with patterns/formats
MAX_PATTERN_SUBSETS = 4  # patternProperties partitioned exactly up to this many patterns
TYPE_ORDER = ("object", "array", "string", "integer", "fraction", "boolean", "null")
_ANY_CODE_POINT = char_class([(0, MAX_CODE_POINT)])


class SchemaBuilder:
    """Builds the rules of one schema document."""

    def __init__(self, layout: Layout, document: Document, generating: bool = False) -> None:
        self.layout = layout
        self.document = document
        self.where = ""  # the pointer of the value being built, for reports outside a node's keywords
        self.generating = generating  # mode="generate": keys once, in schema order; objects closed
        self.rules: dict[str, Expr] = {}
        self.shared: set[str] = set()  # the rules that are free text (`Rule.shared`)
        self._memo: dict[tuple[Any, ...], str] = {}
        self._keep_alive: list[Conjunction] = []  # memo keys hold ids: keep their nodes alive

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

    def new_rule(self, prefix: str, body: Expr) -> RuleRef:
        name = f"{prefix}{len(self.rules)}"
        self.rules[name] = body
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
            number = choice(*(self._number(kind, piece, conj) for piece in _split_at(c, excluded)))
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
        checks = [check for node in conj if (check := _value_check(node)) is not None]
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
            return seq(literal("["), lay.open(depth), _joined(items, lay.comma(depth)), lay.close(depth), literal("]"))
        members = [seq(strings.string_literal(k), lay.colon(), self.literal_value(v, depth + 1))
                   for k, v in value.items()]
        if not members:
            return seq(literal("{"), lay.empty(), literal("}"))
        if self.generating:  # the members in the constant's own order
            body = _joined(members, lay.comma(depth))
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
            body = choice(*(_joined(list(order), lay.comma(depth)) for order in itertools.permutations(members)))
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

    # -- numbers -----------------------------------------------------------------------------

    def _number(self, kind: str, c: Constraints, conj: Conjunction) -> Expr:
        if not conj:
            return numbers.number_range(None, True, None, True) if kind != "integer" else \
                numbers.integer_valued(numbers.integer_range(None, None))
        node = conj[0]
        modulus = _integer_modulus(c.multiple_of, integer=kind == "integer")
        if kind == "integer" or modulus is not None:
            return numbers.integer_valued(self._integer(c, modulus or 1, node))
        if kind == "fraction" and c.lo is None and c.hi is None and not c.multiple_of:
            return numbers.NON_INTEGER
        frac_digits = None
        if c.multiple_of:
            frac_digits = _fraction_digits(c.multiple_of)
            if frac_digits is None:
                node.document.unsupported("multipleOf", node.pointer, f"multipleOf {c.multiple_of[0]} on numbers")
        lo, lo_inc = c.lo if c.lo is not None else (None, True)
        hi, hi_inc = c.hi if c.hi is not None else (None, True)
        return numbers.number_range(lo, lo_inc, hi, hi_inc, frac_digits, non_integer=kind == "fraction")

    def _integer(self, c: Constraints, modulus: int, node: Node) -> Expr:
        lo = None if c.lo is None else _ceil_bound(*c.lo)
        hi = None if c.hi is None else _floor_bound(*c.hi)
        if modulus == 1:
            return numbers.integer_range(lo, hi)
        if modulus > MAX_MODULUS and not (lo is not None and hi is not None
                                          and (hi - lo) // modulus <= MAX_ENUMERATED_MULTIPLES):
            node.document.unsupported("multipleOf", node.pointer, f"a multiple of {modulus} (over {MAX_MODULUS})")
            return numbers.integer_range(lo, hi)
        if lo is not None and hi is not None and (hi - lo) // modulus <= MAX_ENUMERATED_MULTIPLES:
            return numbers.multiples_in_range(lo, hi, modulus)
        natural, helpers = numbers.divisible_rules(f"m{modulus}_", modulus)
        for name, body in helpers.items():
            self.rules.setdefault(name, body)
        alternatives = []
        if (lo is None or lo <= 0) and hi is None:
            alternatives.append(natural)
        if lo is None and (hi is None or hi >= 0):
            alternatives.append(seq(literal("-"), natural))
        if not alternatives or (lo is not None and lo > 0) or (hi is not None and hi < 0) or (
                lo is not None and hi is not None):
            node.document.unsupported("multipleOf", node.pointer, "multipleOf with a wide one-sided range")
            return numbers.integer_range(lo, hi)
        return choice(*alternatives)

    # -- strings -----------------------------------------------------------------------------

    def _string(self, c: Constraints, conj: Conjunction, excluded: list[Any]) -> Expr:
        if c.max_length is not None and c.min_length > c.max_length:
            return NOTHING  # e.g. minLength 1 beside not: {minLength: 1}
        contents: list[tuple[Expr | None, Node]] = [(_pattern_content(p, where), where) for p, where in c.patterns]
        contents += [(strings.format_content(name), where) for name, where in c.formats]
        known = [(content, where) for content, where in contents if content is not None]
        if not known:
            if excluded:
                return self._string_excluding([v for v in excluded if isinstance(v, str)], c)
            return self._free_string(c.min_length, c.max_length)
        content, origin = known[0]
        if excluded:
            origin.document.unsupported("not", origin.pointer, "excluding particular strings with a pattern")
        single = len(known) == 1
        if single and (c.min_length or c.max_length is not None):
            bounded = strings.bounded_pattern(content, c.min_length, c.max_length)
            single = bounded is not None
            content = bounded if bounded is not None else content
        if single:
            return seq(strings.QUOTE, self._named("s", strings.content_to_json(content)), strings.QUOTE)
        return self._string_intersection([k for k, _ in known], c, origin)

    def _string_intersection(self, contents: list[Expr], c: Constraints, origin: Node) -> Expr:
        """Strings matching every pattern/format and the length bounds: a product automaton.

        The product copies the pattern once per length, so bounds above `MAX_INTERSECTED_LENGTH`
        are dropped here (a superset: never a false refusal).
        """
        low = min(c.min_length, MAX_INTERSECTED_LENGTH)
        high = c.max_length if c.max_length is None or c.max_length <= MAX_INTERSECTED_LENGTH else None
        if low != c.min_length or high != c.max_length:
            keyword = "minLength" if low != c.min_length else "maxLength"
            origin.document.unsupported(keyword, origin.pointer,
                                        f"a length bound above {MAX_INTERSECTED_LENGTH} beside a pattern or format")
        operands = [Repeat(strings.any_char(), low, high),
                    *(strings.content_to_json(content) for content in contents)]
        try:
            start = regular.combine(operands, all, f"r{len(self.rules)}_", self.rules)
        except regular.TooLarge:
            keyword = "pattern" if len(contents) > 1 else ("maxLength" if c.max_length is not None else "minLength")
            origin.document.unsupported(keyword, origin.pointer, "patterns, formats and lengths too large to intersect")
            return seq(strings.QUOTE, self._named("s", strings.content_to_json(contents[0])), strings.QUOTE)
        return seq(strings.QUOTE, start, strings.QUOTE)

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

    def _free_string(self, min_length: int, max_length: int | None) -> RuleRef:
        """Any string of the length bounds, quotes included, as a shared rule (`Rule.shared`).

        The opening quote belongs to the rule: the caller's position before it then allows only
        tokens that begin with a quote, and every position where most of the vocabulary may
        follow lies inside this rule, whose masks every grammar with the same bounds shares.
        """
        ref = self._named("str", strings.string_of_length(min_length, max_length))
        self.shared.add(ref.name)
        return ref

    def _string_excluding(self, words: list[str], c: Constraints) -> Expr:
        """Strings other than ``words`` (``not: {enum: [...]}``), with the length bounds."""
        if c.min_length or c.max_length is not None:
            return self._free_string(c.min_length, c.max_length)
        return self._spelled_other_than(sorted(set(words)))

    # -- arrays ------------------------------------------------------------------------------

    def _array(self, c: Constraints, conj: Conjunction, depth: int) -> Expr:
        lay = self.layout
        prefix_len, element_nodes, rest_nodes = _array_elements(c.array_nodes)
        rest_open = rest_nodes is not None
        max_items = c.max_items
        if not rest_open:
            max_items = prefix_len if max_items is None else min(max_items, prefix_len)
        if max_items is not None and c.min_items > max_items:
            return NOTHING
        if c.unique_items and (max_items is None or max_items > 1):
            unique = self._unique_array(c, prefix_len, rest_nodes, max_items, depth)
            if unique is not None:
                return unique
        if c.contains:
            return self._array_with_contains(c, conj, depth, prefix_len, element_nodes, rest_nodes or [])
        elements = [self.value(nodes, depth + 1) for nodes in element_nodes]
        rest = self.value(rest_nodes or [], depth + 1)
        tail = self._items_from(0, elements, rest, c.min_items, max_items, depth)
        empty = seq(literal("["), lay.empty(), literal("]"))
        non_empty = seq(literal("["), lay.open(depth), tail, lay.close(depth), literal("]")) if tail != NOTHING \
            else NOTHING
        return choice(empty, non_empty) if c.min_items == 0 else non_empty

    def _unique_array(self, c: Constraints, prefix_len: int, rest_nodes: Conjunction | None,
                      max_items: int | None, depth: int) -> Expr | None:
        """``uniqueItems`` where every item comes from a finite set of values (enums, constants,
        booleans, null): a subset of that set. Generation writes the subset in the set's order
        (one rule per position and count); validation accepts any order (a state per subset seen,
        up to `MAX_UNIQUE_ANY_ORDER` values). Anything else is reported as unsupported (None)."""
        node = c.unique_items[0]
        if prefix_len and rest_nodes is None and not c.contains:
            return self._unique_tuples(c, node, max_items, depth)
        values = None if prefix_len or c.contains or rest_nodes is None else self._finite_values(rest_nodes)
        limit = MAX_UNIQUE_VALUES if self.generating else MAX_UNIQUE_ANY_ORDER
        if values is None or len(values) > limit:
            detail = ("items that are not drawn from a finite set of values" if values is None
                      else f"more than {limit} distinct item values")
            node.document.unsupported("uniqueItems", node.pointer, detail)
            return None
        most = len(values) if max_items is None else min(max_items, len(values))
        if c.min_items > most:
            return NOTHING
        items = [self.literal_value(v, depth + 1) for v in values]
        if self.generating:
            return self._subset_in_order(items, c.min_items, most, depth)
        return self._subset_any_order(items, c.min_items, most, depth)

    def _unique_tuples(self, c: Constraints, node: Node, max_items: int | None, depth: int) -> Expr | None:
        """``uniqueItems`` on a closed tuple (``prefixItems`` and no further items) whose positions
        each take finitely many values: every array of distinct items, spelled out."""
        _, element_nodes, _ = _array_elements(c.array_nodes)
        most = len(element_nodes) if max_items is None else min(max_items, len(element_nodes))
        choices = [self._finite_values(nodes) for nodes in element_nodes[:most]]
        too_many = math.prod(len(v or []) + 1 for v in choices) > MAX_UNIQUE_TUPLES
        if any(values is None for values in choices) or too_many:
            node.document.unsupported("uniqueItems", node.pointer, "positions that take too many values")
            return None
        lay = self.layout
        arrays: list[Expr] = [seq(literal("["), lay.empty(), literal("]"))] if c.min_items == 0 else []
        for length in range(max(c.min_items, 1), most + 1):
            for items in itertools.product(*(v or [] for v in choices[:length])):
                if len({canonical(v) for v in items}) == length:
                    spelled = [self.literal_value(v, depth + 1) for v in items]
                    arrays.append(seq(literal("["), lay.open(depth), _joined(spelled, lay.comma(depth)),
                                      lay.close(depth), literal("]")))
        return choice(*arrays)

    def _finite_values(self, nodes: Conjunction) -> list[Any] | None:
        """The distinct JSON values that satisfy every node, when they are finitely many and known."""
        found: dict[str, Any] = {}
        for conj in distribute(nodes):
            c = Constraints.of(conj)
            if c.enum is not None:
                candidates = list(c.enum)
            elif c.types <= {"boolean", "null"}:
                scalars = ((True, "boolean"), (False, "boolean"), (None, "null"))
                candidates = [v for v, kind in scalars if kind in c.types]
            else:
                return None
            excluded = {canonical(v) for v in c.not_in}
            for value in candidates:
                if json_type(value) in c.types and canonical(value) not in excluded \
                        and all(satisfies(value, n) for n in conj):
                    found.setdefault(canonical(value), value)
        return list(found.values())

    def _subset_in_order(self, items: list[Expr], least: int, most: int, depth: int) -> Expr:
        """Between ``least`` and ``most`` of ``items``, each at most once, in the given order."""
        lay = self.layout
        base = f"u{len(self.rules)}_"
        for i in range(len(items), -1, -1):
            for n in range(min(i, most) + 1):
                options: list[Expr] = []
                if i < len(items):
                    if n < most:
                        lead = EMPTY if n == 0 else lay.comma(depth)
                        options.append(seq(lead, items[i], RuleRef(f"{base}{i + 1}_{n + 1}")))
                    options.append(RuleRef(f"{base}{i + 1}_{n}"))
                elif n >= max(least, 1):  # the empty array is spelled apart, without the first gap
                    options.append(seq(lay.close(depth), literal("]")))
                self.rules[f"{base}{i}_{n}"] = choice(*options)
        # the first item's whitespace: `[` then open whitespace, unless the array is empty
        first = choice(seq(lay.open(depth), RuleRef(f"{base}0_0")) if most else NOTHING,
                       seq(lay.empty(), literal("]")) if least == 0 else NOTHING)
        return seq(literal("["), first)

    def _subset_any_order(self, items: list[Expr], least: int, most: int, depth: int) -> Expr:
        """Between ``least`` and ``most`` of ``items``, each at most once, in any order."""
        lay = self.layout
        base = f"u{len(self.rules)}_"
        full = (1 << len(items)) - 1
        for seen in range(full, 0, -1):
            count = seen.bit_count()
            options: list[Expr] = []
            if count < most:
                options += [seq(lay.comma(depth), item, RuleRef(f"{base}{seen | 1 << j}"))
                            for j, item in enumerate(items) if not seen >> j & 1]
            if count >= least:
                options.append(seq(lay.close(depth), literal("]")))
            self.rules[f"{base}{seen}"] = choice(*options)
        alternatives = [seq(literal("["), lay.open(depth), choice(*(seq(item, RuleRef(f"{base}{1 << j}"))
                                                                   for j, item in enumerate(items))))] if most else []
        if least == 0:
            alternatives.append(seq(literal("["), lay.empty(), literal("]")))
        return choice(*alternatives)

    def _items_from(self, index: int, elements: list[Expr], rest: Expr, min_items: int, max_items: int | None,
                    depth: int) -> Expr:
        """Items ``index`` onwards of a non-empty array (item 0 has no comma before it)."""
        lay = self.layout
        sep = EMPTY if index == 0 else lay.comma(depth)
        if index >= len(elements):
            least = max(min_items - index, 1 if index == 0 else 0)
            most = None if max_items is None else max_items - index
            if most is not None and least > most:
                return NOTHING
            if index == 0:
                more = Repeat(seq(lay.comma(depth), rest), max(least - 1, 0), None if most is None else most - 1)
                return seq(rest, more)
            return Repeat(seq(lay.comma(depth), rest), least, most)
        if max_items is not None and index >= max_items:
            return EMPTY
        item = seq(sep, elements[index], self._items_from(index + 1, elements, rest, min_items, max_items, depth))
        return choice(EMPTY, item) if index > 0 and index >= min_items else item

    def _array_with_contains(self, c: Constraints, conj: Conjunction, depth: int, prefix_len: int,
                             element_nodes: list[Conjunction], rest_nodes: Conjunction) -> Expr:
        """Arrays where the count of items matching ``contains`` is within [minContains, maxContains]."""
        from codemask.grammar.json_schema.algebra import negation_node

        node = conj[0]
        if prefix_len or len(c.contains) > 1 or c.max_items is not None:
            node.document.unsupported("contains", node.pointer,
                                      "contains with prefixItems, maxItems or another contains")
        target, least, most = c.contains[0]
        lay = self.layout
        hit = self.value([*rest_nodes, target], depth + 1)
        miss = self.value([*rest_nodes, negation_node(target)], depth + 1) if most is not None else \
            self.value(rest_nodes, depth + 1)
        cap = most if most is not None else least
        # state k: k matches so far (saturating at cap when there is no maximum)
        names = {k: f"c{len(self.rules)}_{k}" for k in range(cap + 1)}
        for k in range(cap + 1):
            after_hit = min(k + 1, cap) if most is None else k + 1
            options: list[Expr] = []
            if k >= least:
                options.append(EMPTY)
            options.append(seq(lay.comma(depth), miss, RuleRef(names[k])))
            if after_hit <= cap:
                options.append(seq(lay.comma(depth), hit, RuleRef(names[after_hit])))
            self.rules[names[k]] = choice(*options)
        first = [seq(miss, RuleRef(names[0]))]
        if cap >= 1:
            first.append(seq(hit, RuleRef(names[min(1, cap)])))
        body = seq(literal("["), lay.open(depth), choice(*first), lay.close(depth), literal("]"))
        if least == 0 and c.min_items == 0:
            return choice(seq(literal("["), lay.empty(), literal("]")), body)
        return body

    # -- objects -----------------------------------------------------------------------------

    def _object(self, c: Constraints, conj: Conjunction, depth: int) -> Expr:
        lay = self.layout
        known = _known_keys(c)
        for node in c.object_nodes:
            if _unevaluated_only(node):
                evaluated = statically_evaluated(node)
                if evaluated.guessed:
                    node.document.unsupported("unevaluatedProperties", node.pointer,
                                              "properties an anyOf branch may or may not evaluate")
                known += [k for k in sorted(evaluated.keys) if k not in known]
        members: list[tuple[str | None, Expr]] = []
        for key in known:
            value_nodes = _value_nodes_for(key, c.object_nodes)
            if value_nodes is None or not _name_allowed(key, c.object_nodes):
                if key in c.required:
                    return NOTHING
                continue
            member = seq(strings.string_literal(key), lay.colon(), self.value(value_nodes, depth + 1))
            members.append((key, self._named("m", member)))
        others = self._other_keys(c, known)
        if self.generating and not _declares_other_keys(c.object_nodes):  # closed unless the schema opens it
            declared = [other for other in others if not other[2]]
            if declared or c.min_properties <= len(members):  # else only undeclared keys can reach minProperties
                others = declared
        for key_expr, value_nodes, _ in others:
            members.append((None, self._named("m", seq(key_expr, lay.colon(), self.value(value_nodes, depth + 1)))))
        if self.generating:
            return self._object_in_order(members, c, depth)
        return self._object_states(members, c, depth)

    def _other_keys(self, c: Constraints, known: list[str]) -> list[tuple[Expr, Conjunction, bool]]:
        """(key, value nodes, additional) for keys no ``properties`` names: patterns, then additional ones.

        Without ``propertyNames``, the additional keys are exactly the strings that are not known
        keys (in any spelling), so a known key can never dodge its own schema.
        """
        nodes = c.object_nodes
        restrictive = [n for n in nodes if _restricts_others(n) and not (_unevaluated_only(n) and (
            any(_evaluates_all(m) for m in _descendants(n, nodes)) or statically_evaluated(n).open_ended
            or statically_evaluated(n).patterns))]
        names = self._property_names(c, known)
        _report_property_names_overlap(c, known)
        if not restrictive:
            return [(names, [], True)]
        node = restrictive[0]
        if len(restrictive) > 1:
            if all(not n.get("patternProperties") and _additional(n) is False for n in restrictive):
                return []
            node.document.unsupported("additionalProperties", node.pointer,
                                      "additional or pattern properties constrained by several subschemas")
            return [(names, [], True)]
        patterns = node.get("patternProperties") or {}
        additional = _additional(node)
        keyword = "additionalProperties" if "additionalProperties" in node.schema else "unevaluatedProperties"
        if patterns:
            exact = self._pattern_keys(node, patterns, known, additional, keyword)
            if exact is not None:
                return exact
            if len(patterns) > 1 or additional is not False:
                node.document.unsupported("patternProperties", node.pointer,
                                          f"more than {MAX_PATTERN_SUBSETS} patterns, or patterns too large to "
                                          "partition: a key matching one may be read by another's schema")
        out: list[tuple[Expr, Conjunction, bool]] = []
        for pattern, sub in patterns.items():
            content = _pattern_content(pattern, node)
            if content is None:
                content = Repeat(_ANY_CODE_POINT, 0, None)
            key = seq(strings.QUOTE, self._named("s", strings.content_to_json(content)), strings.QUOTE)
            out.append((key, [node.child(sub, "patternProperties", pattern)], False))
        if additional is not False:
            out.append((names, [node.child(additional, keyword)], True))
        return out

    def _pattern_keys(self, node: Node, patterns: dict[str, Any], known: list[str], additional: Any,
                      keyword: str) -> list[tuple[Expr, Conjunction, bool]] | None:
        """Keys partitioned exactly by which patterns they match, None if the automaton is too large.

        A key matching several patterns must satisfy all their schemas; a key matching none (and
        not a named property) is additional. Works on JSON spellings, so ``ensure_ascii`` keys
        (``\\u00e9``) are classified by what they decode to.
        """
        contents = [_pattern_content(p, node) for p in patterns]
        if any(c is None for c in contents) or len(patterns) > MAX_PATTERN_SUBSETS:
            return None
        operands: list[Expr] = [Repeat(strings.any_char(), 0, None),
                                *(strings.content_to_json(c) for c in contents if c is not None),
                                choice(*(strings.string_content(k) for k in known))]
        subs = [node.child(sub, "patternProperties", p) for p, sub in patterns.items()]
        count = len(subs)
        out: list[tuple[Expr, Conjunction, bool]] = []
        try:
            for mask in range(1, 1 << count):
                chosen = [i for i in range(count) if mask >> i & 1]
                key = self._regular_key(operands, functools.partial(_matches_exactly, mask=mask, count=count))
                if key is not None:
                    out.append((key, [subs[i] for i in chosen], False))
            if additional is not False:
                key = self._regular_key(operands, functools.partial(_matches_exactly, mask=0, count=count))
                if key is not None:
                    out.append((key, [node.child(additional, keyword)], True))
        except regular.TooLarge:
            return None
        return out

    def _regular_key(self, operands: list[Expr], accept: Callable[[tuple[bool, ...]], bool]) -> Expr | None:
        start = regular.combine(operands, accept, f"r{len(self.rules)}_", self.rules)
        return None if start == NOTHING else seq(strings.QUOTE, start, strings.QUOTE)

    def _property_names(self, c: Constraints, known: list[str]) -> Expr:
        """Keys other than the known ones that ``propertyNames`` allows (it may let known ones through)."""
        name_nodes = [n.child(n.schema["propertyNames"], "propertyNames") for n in c.object_nodes
                      if "propertyNames" in n.schema]
        if not name_nodes:
            return self._other_names(tuple(sorted(known)))
        options = []
        for conj in distribute(name_nodes):
            sub = Constraints.of(conj)
            if "string" in sub.types:
                if sub.enum is not None:
                    options += [strings.string_literal(v) for v in sub.enum if isinstance(v, str)
                                and all(satisfies(v, n) for n in conj)]
                else:
                    options.append(self._string(sub, conj, [v for v in sub.not_in if isinstance(v, str)]))
        return choice(*options)

    def _other_names(self, known: tuple[str, ...]) -> Expr:
        """JSON strings other than the known keys: one shared rule per set of keys."""
        key = ("names", known)
        name = self._memo.get(key)
        if name is None:
            name = self._memo[key] = f"k{len(self._memo)}"
            self.rules[name] = self._spelled_other_than(list(known))
        return RuleRef(name)

    def _spelled_other_than(self, words: list[str]) -> Expr:
        """JSON strings that spell none of ``words`` as `strings.string_literal` does."""
        if not words:
            return self._free_string(0, None)
        rest = self._named("chars", Repeat(strings.any_char(), 0, None))
        beyond_ascii = self._named("xchars", seq(strings.escaped_or_beyond_ascii(), rest))
        return seq(strings.QUOTE, _trie_complement(words, "", rest, beyond_ascii), strings.QUOTE)

    def _object_in_order(self, members: list[tuple[str | None, Expr]], c: Constraints, depth: int) -> Expr:
        """Generation: the named keys at most once each, in the schema's order, every required one
        present; then keys of ``patternProperties``/``additionalProperties`` (any number).

        State ``(i, n)``: the named keys before ``i`` are decided and ``n`` members are written
        (saturating at the largest count ``min``/``maxProperties`` needs; without them ``n`` only
        tells whether a comma comes next). One rule per state, so a schema of ``k`` properties
        costs ``O(k)`` rules and "every required key" is exact however many there are.
        """
        lay = self.layout
        named = [(key, member) for key, member in members if key is not None]
        others = [member for key, member in members if key is None]
        required = set(c.required)
        counted = c.min_properties > len(required) or c.max_properties is not None
        cap = max(c.max_properties if c.max_properties is not None else c.min_properties, 1) if counted else 1
        if (len(named) + 1) * (cap + 1) > MAX_OBJECT_RULES:
            node = c.object_nodes[0] if c.object_nodes else None
            if node is not None:
                node.document.unsupported("maxProperties", node.pointer, "a property count this large")
            counted, cap = False, 1
        base = f"g{len(self.rules)}_"

        def name(i: int, n: int) -> str:
            return f"{base}{i}_{n}"

        def write(n: int, member: Expr, then: str) -> list[Expr]:
            if counted and c.max_properties is not None and n >= c.max_properties:
                return []
            return [seq(lay.open(depth) if n == 0 else lay.comma(depth), member, RuleRef(then))]

        for n in range(cap + 1):
            following = min(n + 1, cap)
            for i, (key, member) in enumerate(named):
                options = write(n, member, name(i + 1, following))
                if key not in required:
                    options.append(RuleRef(name(i + 1, n)))
                self.rules[name(i, n)] = choice(*options)
            ending: list[Expr] = []
            for member in others:
                ending += write(n, member, name(len(named), following))
            if n >= (c.min_properties if counted else 0):
                ending.append(seq(lay.close(depth) if n else lay.empty(), literal("}")))
            self.rules[name(len(named), n)] = choice(*ending)
        return seq(literal("{"), RuleRef(name(0, 0)))

    def _object_states(self, members: list[tuple[str | None, Expr]], c: Constraints, depth: int) -> Expr:
        """Members in any order until the required ones are all seen and the count is in range."""
        lay = self.layout
        # Required keys are tracked as the set seen so far, which costs a state per subset: as many
        # as MAX_OBJECT_ALTERNATIVES allows (at least MAX_REQUIRED_SET); beyond that the rest are
        # not enforced (a superset, reported: enforcing an order would refuse valid objects).
        tracked = len(c.required)
        while tracked > MAX_REQUIRED_SET and (1 << tracked) * max(len(members), 1) > MAX_OBJECT_ALTERNATIVES:
            tracked -= 1
        required = c.required[:tracked]
        if len(c.required) > tracked:
            c.required_nodes[tracked].document.unsupported(
                "required", c.required_nodes[tracked].pointer,
                f"{len(c.required)} required keys in any order (mode='generate' enforces them all)")
        index = {k: i for i, k in enumerate(required)}
        counted = c.min_properties > len(required) or c.max_properties is not None
        cap = (c.max_properties if c.max_properties is not None else c.min_properties) if counted else 0
        if 2 ** len(required) * (cap + 1) > max(MAX_OBJECT_STATES, 2 ** len(required)):
            counted, cap = False, 0
            node = c.object_nodes[0] if c.object_nodes else None
            if node is not None:
                node.document.unsupported("maxProperties", node.pointer, "a property count this large")
        full = (1 << len(required)) - 1
        base = f"o{len(self.rules)}_"

        def advance(state: int, key: str | None) -> int | None:
            return state if key is None or key not in index else state | (1 << index[key])

        def ready(state: int, count: int) -> bool:
            return state == full and count >= (c.min_properties if counted else 0)

        built: set[tuple[int, int]] = set()
        pending: list[tuple[int, int]] = []

        def ref(state: int, count: int) -> RuleRef:
            if (state, count) not in built:
                built.add((state, count))
                pending.append((state, count))
            return RuleRef(f"{base}{state}_{count}")

        def steps(state: int, count: int, lead: Expr) -> list[Expr]:
            out: list[Expr] = []
            if counted and c.max_properties is not None and count >= c.max_properties:
                return out
            nxt_count = min(count + 1, cap) if counted else 0
            for key, member in members:
                nxt = advance(state, key)
                if nxt is not None:
                    out.append(seq(lead, member, ref(nxt, nxt_count)))
            return out

        first = steps(0, 0, lay.open(depth))
        while pending:
            state, count = pending.pop()
            options = steps(state, count, lay.comma(depth))
            if ready(state, count):
                options.append(lay.close(depth))
            self.rules[f"{base}{state}_{count}"] = choice(*options)
        alternatives = [seq(literal("{"), choice(*first), literal("}"))] if first else []
        if ready(0, 0):
            alternatives.append(seq(literal("{"), lay.empty(), literal("}")))
        return choice(*alternatives)


# -- helpers ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Evaluated:
    """What the in-place applicators under a node may evaluate, read from the schema alone.

    ``unevaluatedProperties``/``unevaluatedItems`` only constrain what nothing else evaluated.
    ``allOf`` and ``$ref`` always apply; any ``anyOf`` branch may hold alongside the one an
    alternative chose, so all count (erring on "evaluated": the keyword is applied less, never
    wrongly), and so does a lone ``if``. ``oneOf``, ``if``/``then``/``else`` and
    ``dependentSchemas`` need no guess: the compiler's alternatives hold exactly the branches that
    apply, and :func:`_descendants` reads their annotations.
    """

    keys: set[str] = dataclasses.field(default_factory=set)
    patterns: set[str] = dataclasses.field(default_factory=set)
    open_ended: bool = False  # some subschema evaluates every property
    prefix: int = 0
    all_items: bool = False
    guessed: bool = False  # an ``anyOf`` branch or a lone ``if`` evaluated something (read as always)

    def covers(self, key: str) -> bool:
        return self.open_ended or key in self.keys or any(_search(p, key) for p in self.patterns)


def statically_evaluated(node: Node) -> Evaluated:
    """The properties and items a node's in-place applicators (``allOf``, ``$ref``, …) may evaluate."""
    found = Evaluated()
    root = Node(node.origin or node.schema, node.resolver, node.pointer, node.document)
    stack: list[tuple[Node, bool]] = [(root, False)]
    seen: set[tuple[int, str]] = set()
    while stack:
        current, maybe = stack.pop()
        schema = current.schema
        if current.identity in seen or not isinstance(schema, dict):
            continue
        seen.add(current.identity)
        before = dataclasses.replace(found, keys=set(found.keys), patterns=set(found.patterns))
        _collect(found, current, is_root=current is root)
        if maybe and found != before:
            found.guessed = True
        stack += [(current.child(sub, "allOf", i), maybe) for i, sub in enumerate(schema.get("allOf", []))]
        stack += [(current.child(sub, "anyOf", i), True) for i, sub in enumerate(schema.get("anyOf", []))]
        if "if" in schema and "then" not in schema and "else" not in schema:
            stack.append((current.child(schema["if"], "if"), True))
        for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
            if keyword in schema:
                with contextlib.suppress(UnsupportedSchemaError):
                    target = current.resolve(keyword)
                    if target is not None:
                        stack.append((target, maybe))
    return found


def _collect(found: Evaluated, node: Node, is_root: bool) -> None:
    schema = node.schema
    found.keys |= set(schema.get("properties") or {})
    found.patterns |= set(schema.get("patternProperties") or {})
    if "additionalProperties" in schema or (not is_root and schema.get("unevaluatedProperties", False) is not False):
        found.open_ended = True
    found.prefix = max(found.prefix, _prefix_length(node))
    rest = "items" in schema and not (node.document.tuple_items and isinstance(schema["items"], list))
    if rest or "additionalItems" in schema or "contains" in schema or (
            not is_root and schema.get("unevaluatedItems", False) is not False):
        found.all_items = True


def satisfies(value: Any, node: Node) -> bool:
    """Whether a JSON value satisfies a node (``jsonschema`` for user schemas; ours for synthetic ones)."""
    schema = node.schema
    if isinstance(schema, bool):
        return schema
    if not _is_synthetic(schema):
        validator = node.document.validator_class(schema, _resolver=node.resolver)
        return bool(validator.is_valid(value))
    alternatives = distribute([node])
    for conj in alternatives:
        c = Constraints.of(conj)
        if json_type(value) not in c.types and not (json_type(value) == "integer" and "integer" in c.types):
            continue
        if canonical(value) in {canonical(v) for v in c.not_in}:
            continue
        if c.enum is not None and canonical(value) not in {canonical(v) for v in c.enum}:
            continue
        if all(_plain_satisfies(value, n) for n in conj):
            return True
    return False


def _value_check(node: Node) -> Callable[[Any], bool] | None:
    """Whether an enum value (already a member of every enum and const of the conjunction, see
    `Constraints`) satisfies the rest of ``node``; None where nothing is left to check. The
    schema is checked without its enum: `satisfies` against the whole schema walked the whole enum
    for every value (quadratic: 16,000 values took a minute)."""
    schema = node.schema
    if isinstance(schema, bool):
        return None if schema else (lambda _value: False)
    rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
    if not set(rest) - ANNOTATIONS - {"type"}:  # (`_enum` filters by the conjunction's types)
        return None
    return functools.partial(satisfies, node=dataclasses.replace(node, schema=rest, origin=node.origin or schema))


def _plain_satisfies(value: Any, node: Node) -> bool:
    schema = node.schema
    if not _is_synthetic(schema):
        return satisfies(value, node)
    c = Constraints.of([node])
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        x = Fraction(value)
        if c.lo is not None and (x < c.lo[0] or (x == c.lo[0] and not c.lo[1])):
            return False
        if c.hi is not None and (x > c.hi[0] or (x == c.hi[0] and not c.hi[1])):
            return False
    if isinstance(value, str) and not c.min_length <= len(value) <= (c.max_length or len(value)):
        return False
    if isinstance(value, list):
        if not c.min_items <= len(value) <= (len(value) if c.max_items is None else c.max_items):
            return False
        for target, least, _most in c.contains:
            if sum(satisfies(v, target) for v in value) < least:
                return False
        if "x-items" in schema and not all(satisfies(v, node.child(schema["x-items"], "x-items")) for v in value):
            return False
    if isinstance(value, dict):
        if any(k not in value for k in c.required):
            return False
        for key, sub in schema.get("properties", {}).items():
            if key in value and not satisfies(value[key], node.child(sub, "properties", key)):
                return False
    return True


def _is_synthetic(schema: Any) -> bool:
    return isinstance(schema, dict) and (any(k.startswith("x-") and k in _INTERNAL for k in schema)
                                         or _holds_nodes(schema))


_INTERNAL = frozenset(["x-types", "x-not-in", "x-lo", "x-hi", "x-items"])


def _holds_nodes(value: Any) -> bool:
    if isinstance(value, Node):
        return True
    if isinstance(value, dict):
        return any(_holds_nodes(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_nodes(v) for v in value)
    return False


def _joined(items: list[Expr], separator: Expr) -> Expr:
    body: list[Expr] = [items[0]]
    for item in items[1:]:
        body += [separator, item]
    return seq(*body)


def _matches_exactly(bits: tuple[bool, ...], mask: int, count: int) -> bool:
    """Raw key (bit 0), matching exactly the patterns in ``mask`` (bits 1..count), not a known key."""
    in_universe, matched, is_known = bits[0], bits[1:count + 1], bits[count + 1]
    return in_universe and not is_known and all(matched[i] == bool(mask >> i & 1) for i in range(count))


def _split_at(c: Constraints, excluded: list[Any]) -> list[Constraints]:
    """The number constraints as pieces of range that avoid the excluded values (``not: {const: 3}``)."""
    pieces = [c]
    for value in sorted({Fraction(repr(v)) if isinstance(v, float) else Fraction(v) for v in excluded}):
        out = []
        for piece in pieces:
            below = piece.hi is None or value < piece.hi[0] or (value == piece.hi[0] and piece.hi[1])
            above = piece.lo is None or value > piece.lo[0] or (value == piece.lo[0] and piece.lo[1])
            if below and above:
                out += [dataclasses.replace(piece, hi=(value, False)), dataclasses.replace(piece, lo=(value, False))]
            else:
                out.append(piece)
        pieces = out
    return pieces


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


def _integer_modulus(multiples: list[Fraction], integer: bool) -> int | None:
    """The integer every value must be a multiple of, when the multipleOf values imply integers."""
    if not multiples:
        return None
    if not integer and any(m.denominator != 1 for m in multiples):
        return None
    return functools.reduce(math.lcm, (m.numerator for m in multiples), 1)


def _fraction_digits(multiples: list[Fraction]) -> int | None:
    """k when every multipleOf is exactly 10**-k for one k (the common ``0.01``); else None."""
    digits = set()
    for m in multiples:
        k = round(math.log10(m.denominator)) if m.numerator == 1 else -1
        if k < 0 or Fraction(1, 10**k) != m:
            return None
        digits.add(k)
    return max(digits) if len(digits) == 1 else None


def _ceil_bound(value: Fraction, inclusive: bool) -> int:
    n = math.ceil(value)
    return n + 1 if n == value and not inclusive else n


def _floor_bound(value: Fraction, inclusive: bool) -> int:
    n = math.floor(value)
    return n - 1 if n == value and not inclusive else n


def _pattern_content(pattern: str, node: Node) -> Expr | None:
    try:
        return strings.pattern_content(pattern)
    except UnsupportedRegexError as exc:
        node.document.unsupported("pattern", node.pointer, f"{pattern!r}: {exc.reason}")
    except (re.error, GrammarSyntaxError) as exc:
        node.document.unsupported("pattern", node.pointer, f"{pattern!r} is not a regex Python reads: {exc}")
    return None


def _trie_complement(words: list[str], prefix: str, any_rest: Expr, beyond_ascii: Expr) -> Expr:
    """JSON string contents that spell none of ``words`` (all starting with ``prefix``) as
    `strings.string_literal` spells them (printable ASCII raw, other characters in any spelling).

    ``any_rest`` matches any string content, and ``beyond_ascii`` an escaped or raw non-ASCII
    character followed by any content (shared rules: they follow every branch, and keeping
    the branches small keeps the rule's automaton small).
    """
    depth = len(prefix)
    here = [w for w in words if w.startswith(prefix)]
    next_chars = sorted({w[depth] for w in here if len(w) > depth})
    alternatives: list[Expr] = []
    if prefix not in here:
        alternatives.append(EMPTY)
    if all(strings.spelled_raw_only(ch) for ch in next_chars):
        alternatives += [seq(strings.other_raw_ascii(next_chars), any_rest), beyond_ascii]
    else:
        alternatives.append(seq(strings.other_char_spellings(next_chars), any_rest))
    for ch in next_chars:
        alternatives.append(seq(strings.literal_char(ch), _trie_complement(here, prefix + ch, any_rest, beyond_ascii)))
    return choice(*alternatives)


def _array_elements(nodes: list[Node]) -> tuple[int, list[Conjunction], Conjunction | None]:
    """Per position, the nodes an item must satisfy; then those of the items after the prefix.

    The rest is None when no item may follow the prefix (``items: false``).
    """
    length = max((_prefix_length(n) for n in nodes), default=0)
    unevaluated_from = _unevaluated_items_start(nodes, length)
    if unevaluated_from is not None:
        length = max(length, unevaluated_from)
    closed = [n for n in nodes if _closed(n, unevaluated_from)]
    if closed:
        length = min(length, min(_closed_at(n, unevaluated_from) for n in closed))
    elements = [[x for n in nodes for x in _element_nodes(n, i, unevaluated_from)] for i in range(length)]
    if closed:
        return length, elements, None
    return length, elements, [x for n in nodes for x in _element_nodes(n, _BEYOND_ANY_PREFIX, unevaluated_from)]


_BEYOND_ANY_PREFIX = 1 << 62


def _unevaluated_items_start(nodes: list[Node], prefix: int) -> int | None:
    """Where ``unevaluatedItems`` starts to apply, or None where other keywords evaluate every item.

    Items are evaluated by a prefix, by ``items``, or by ``contains`` (which we cannot follow, so
    its presence switches ``unevaluatedItems`` off: a superset, never a false refusal).
    """
    start = prefix
    for node in nodes:
        schema = node.schema
        rest_items = "items" in schema and not (node.document.tuple_items and isinstance(schema["items"], list))
        if rest_items or "additionalItems" in schema or "x-items" in schema:
            return None
        if "contains" in schema:
            for other in nodes:
                if other.schema.get("unevaluatedItems", True) is not True:
                    other.document.unsupported("unevaluatedItems", other.pointer, "next to contains")
            return None
        if schema.get("unevaluatedItems") is True:
            return None
        if "unevaluatedItems" in schema:
            evaluated = statically_evaluated(node)
            if evaluated.guessed:
                node.document.unsupported("unevaluatedItems", node.pointer,
                                          "items an anyOf branch may or may not evaluate")
            if evaluated.all_items:
                return None
            start = max(start, evaluated.prefix)
    return start


def _prefix_length(node: Node) -> int:
    schema = node.schema
    if "prefixItems" in schema:
        return len(schema["prefixItems"])
    if node.document.tuple_items and isinstance(schema.get("items"), list):
        return len(schema["items"])
    return 0


def _closed_at(node: Node, unevaluated_from: int | None) -> int:
    """The position from which a closed node admits no item."""
    own = _prefix_length(node)
    schema = node.schema
    closes_itself = ("items" in schema and "prefixItems" in schema) or "additionalItems" in schema or (
        "items" in schema and not node.document.tuple_items and "prefixItems" not in schema)
    if not closes_itself and unevaluated_from is not None:
        return max(own, unevaluated_from)
    return own


def _closed(node: Node, unevaluated_from: int | None) -> bool:
    return flatten(_element_nodes(node, _BEYOND_ANY_PREFIX, unevaluated_from)) is None


def _element_nodes(node: Node, i: int, unevaluated_from: int | None) -> Conjunction:
    """The nodes item ``i`` must satisfy under one node."""
    schema = node.schema
    if "prefixItems" in schema:
        items = schema["prefixItems"]
        if i < len(items):
            return [node.child(items[i], "prefixItems", i)]
        if "items" in schema:
            return [node.child(schema["items"], "items")]
    elif node.document.tuple_items and isinstance(schema.get("items"), list):
        items = schema["items"]
        if i < len(items):
            return [node.child(items[i], "items", i)]
        if "additionalItems" in schema:
            return [node.child(schema["additionalItems"], "additionalItems")]
    elif "items" in schema or "x-items" in schema:
        keyword = "items" if "items" in schema else "x-items"
        return [node.child(schema[keyword], keyword)]
    if "unevaluatedItems" in schema and unevaluated_from is not None and i >= unevaluated_from:
        return [node.child(schema["unevaluatedItems"], "unevaluatedItems")]
    return []


def _known_keys(c: Constraints) -> list[str]:
    keys: list[str] = []
    for node in c.object_nodes:
        for key in node.get("properties") or {}:
            if key not in keys:
                keys.append(key)
    for key in c.required:
        if key not in keys:
            keys.append(key)
    return keys


def _value_nodes_for(key: str, nodes: list[Node]) -> Conjunction | None:
    """What the value of ``key`` must satisfy under every node; None when a node forbids the key."""
    out: Conjunction = []
    for node in nodes:
        properties = node.get("properties") or {}
        matched = [node.child(sub, "patternProperties", p) for p, sub in (node.get("patternProperties") or {}).items()
                   if _search(p, key)]
        out += matched  # a named property that matches a pattern must satisfy both
        if key in properties:
            out.append(node.child(properties[key], "properties", key))
            continue
        if matched:
            continue
        additional = _additional(node)
        if additional is not True and not (_unevaluated_only(node) and (
                _evaluated_elsewhere(key, node, nodes) or statically_evaluated(node).covers(key))):
            keyword = "additionalProperties" if "additionalProperties" in node.schema else "unevaluatedProperties"
            out.append(node.child(additional, keyword))
    return None if flatten(out) is None else out


def _report_property_names_overlap(c: Constraints, known: list[str]) -> None:
    """With ``propertyNames`` and room for additional keys, a known key may also be read as an
    additional one (its spelling is not excluded from the names): report that superset."""
    with_names = [n for n in c.object_nodes if "propertyNames" in n.schema]
    if not with_names or all(_additional(n) is False for n in c.object_nodes):
        return
    names = [n.child(n.schema["propertyNames"], "propertyNames") for n in with_names]
    if any(all(satisfies(k, n) for n in names) for k in known):
        with_names[0].document.unsupported("propertyNames", with_names[0].pointer,
                                           "a named property may also be written as an additional key")


def _declares_other_keys(nodes: list[Node]) -> bool:
    """Whether the schema itself allows keys beyond ``properties``/``patternProperties``: an
    ``additionalProperties``/``unevaluatedProperties`` that is not ``false``, or ``propertyNames``."""
    return any(isinstance(n.schema, dict) and (
        n.schema.get("additionalProperties", False) is not False
        or n.schema.get("unevaluatedProperties", False) is not False or "propertyNames" in n.schema) for n in nodes)


def _unevaluated_only(node: Node) -> bool:
    return "additionalProperties" not in node.schema and "unevaluatedProperties" in node.schema


def _evaluates_all(node: Node) -> bool:
    """Whether a node evaluates every property (so others' ``unevaluatedProperties`` see none left)."""
    schema = node.schema
    return "additionalProperties" in schema or schema.get("unevaluatedProperties", False) is not False


def _descendants(node: Node, nodes: list[Node]) -> list[Node]:
    """The user-written nodes of the conjunction that sit under ``node``'s in-place applicators.

    Only their annotations reach ``node``'s ``unevaluated*``: a sibling's or a parent's do not,
    and the compiler's own nodes (negations of failing branches) carry none.
    """
    inside = node.pointer + "/"
    return [n for n in nodes if n is not node and n.pointer.startswith(inside) and not _is_synthetic(n.schema)]


def _evaluated_elsewhere(key: str, node: Node, nodes: list[Node]) -> bool:
    """Whether a subschema applied under ``node`` evaluates ``key`` (names it, matches it, or takes all)."""
    for other in _descendants(node, nodes):
        if key in (other.get("properties") or {}) or _evaluates_all(other):
            return True
        if any(_search(p, key) for p in other.get("patternProperties") or {}):
            return True
    return False


def _name_allowed(key: str, nodes: list[Node]) -> bool:
    return all(satisfies(key, n.child(n.schema["propertyNames"], "propertyNames"))
               for n in nodes if "propertyNames" in n.schema)


def _additional(node: Node) -> Any:
    schema = node.schema
    if "additionalProperties" in schema:
        return schema["additionalProperties"]
    return schema.get("unevaluatedProperties", True)


def _restricts_others(node: Node) -> bool:
    return bool(node.get("patternProperties")) or _additional(node) is not True


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(strings.ecma_to_python(pattern))
    except re.error:
        return None


def _search(pattern: str, key: str) -> bool:
    compiled = _compiled(pattern)
    return compiled is not None and compiled.search(key) is not None
