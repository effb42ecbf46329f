"""Whether a JSON value satisfies a schema node, asked while the rules are built.

The builder needs answers for single values: which enum members survive the other keywords of
their conjunction, which values an array item may take (``uniqueItems``), which known keys
``propertyNames`` admits, which items ``contains`` counts. User-written schemas are checked with
``jsonschema`` (the document's validator class); the nodes the compiler makes itself (negations of
failing branches, with ``x-`` keywords and nested nodes) are checked here, by their constraints.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from codemask.grammar.json_schema.algebra import distribute
from codemask.grammar.json_schema.constraints import Constraints
from codemask.grammar.json_schema.nodes import ANNOTATIONS, Node, canonical, json_type


def satisfies(value: Any, node: Node) -> bool:
    """Whether a JSON value satisfies a node (``jsonschema`` for user schemas; ours for synthetic ones)."""
    schema = node.schema
    if isinstance(schema, bool):
        return schema
    if not is_synthetic(schema):
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


def value_check(node: Node) -> Callable[[Any], bool] | None:
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
    if not is_synthetic(schema):
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


def is_synthetic(schema: Any) -> bool:
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
