"""Arrays: items by position, counts, ``contains`` and ``uniqueItems``.

An array is a comma-separated run of items: each position of a prefix (``prefixItems``, or a list
under ``items`` in older drafts) has the nodes its item must satisfy, and the items after it those of
``items``/``additionalItems`` or ``unevaluatedItems``; ``minItems``/``maxItems`` bound the run.
``contains`` with ``minContains``/``maxContains`` counts the matching items, a state per count.
``uniqueItems`` is exact where the items come from a finite set of values (enums, constants,
booleans, null): a subset of the values, written in their order when generating and in any order
when validating (a state per subset seen), or every array of distinct items of a closed tuple;
anywhere else it is reported and not enforced.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from codemask.grammar.ir import EMPTY, NOTHING, Expr, Repeat, RuleRef, choice, literal, seq
from codemask.grammar.json_schema.algebra import Conjunction, distribute, flatten
from codemask.grammar.json_schema.base import BuilderBase, joined
from codemask.grammar.json_schema.constraints import Constraints
from codemask.grammar.json_schema.evaluation import prefix_length, statically_evaluated
from codemask.grammar.json_schema.nodes import Node, canonical, json_type
from codemask.grammar.json_schema.satisfies import satisfies

MAX_UNIQUE_VALUES = 256  # uniqueItems over a finite set, written in its order
MAX_UNIQUE_ANY_ORDER = 8  # ... accepted in any order: a state per subset
MAX_UNIQUE_TUPLES = 512  # uniqueItems on a closed tuple: arrays spelled out


class ArrayRules(BuilderBase):
    """The schema builder's rules for arrays."""

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
                    arrays.append(seq(literal("["), lay.open(depth), joined(spelled, lay.comma(depth)),
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


def _array_elements(nodes: list[Node]) -> tuple[int, list[Conjunction], Conjunction | None]:
    """Per position, the nodes an item must satisfy; then those of the items after the prefix.

    The rest is None when no item may follow the prefix (``items: false``).
    """
    length = max((prefix_length(n) for n in nodes), default=0)
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


def _closed_at(node: Node, unevaluated_from: int | None) -> int:
    """The position from which a closed node admits no item."""
    own = prefix_length(node)
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
