"""Schema algebra: a conjunction of subschemas, expanded into alternatives of plain constraints.

A grammar alternative is a *union*, but JSON Schema also intersects (``allOf``, ``$ref`` next to
siblings, ``if``/``then``), complements (``not``) and conditions (``dependentSchemas``). The
compiler therefore works on a **conjunction** of nodes and rewrites it into a disjunctive normal
form whose members only hold keywords that constrain one value directly:

- :func:`flatten` inlines ``allOf`` and references (a node met twice in one conjunction is kept
  once, which is also what makes recursive ``allOf``/``$ref`` cycles finite);
- :func:`distribute` turns ``anyOf``/``oneOf``, ``if``/``then``/``else``, ``not`` and the
  dependency keywords into alternatives; ``oneOf`` is read as ``anyOf`` (exact when its branches
  are disjoint, which is how schemas use it; otherwise it over-approximates);
- :func:`negate` pushes ``not`` inward (De Morgan), turning each keyword into the constraint
  that fails it, expressed with the internal keywords below. Keywords whose complement is not a
  context-free language (``pattern``, ``uniqueItems``, …) are reported as unsupported.

Internal keywords used in synthetic schemas (never read from user schemas): ``x-types`` (a list
of internal types), ``x-not-in`` (excluded values), ``x-lo``/``x-hi`` (``[bound, inclusive]``),
``x-items`` (every item, whatever the draft).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from codemask.errors import UnsupportedSchemaError
from codemask.grammar.json_schema.nodes import ANNOTATIONS, VALUE_TYPES, Node, canonical, types_of

REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
DISJUNCTIVE = ("anyOf", "oneOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
               "dependencies")
MAX_ALTERNATIVES = 512
Conjunction = list[Node]


def flatten(nodes: list[Node]) -> Conjunction | None:
    """The plain nodes of a conjunction (``allOf`` and references inlined); None if it is ``false``.

    A node met twice is kept once, which also makes recursive ``allOf``/``$ref`` cycles finite. A
    cycle that constrains nothing (``{"$ref": "#"}``) has no meaning a validator can reach (it
    recurses forever): it is reported as unsupported rather than read as "anything".
    """
    if len(nodes) == 1:  # (most calls: one subschema that inlines nothing, no walk needed)
        schema = nodes[0].schema
        if type(schema) is dict and "allOf" not in schema and schema.keys().isdisjoint(REFERENCES):
            return [] if schema.keys() <= ANNOTATIONS else [nodes[0]]
    out: Conjunction = []
    seen: set[tuple[int, str]] = set()
    open_nodes: set[tuple[int, str]] = set()  # the nodes whose inlined parts are being walked
    cycle: Node | None = None
    stack: list[tuple[Node, bool]] = [(node, True) for node in reversed(nodes)]
    while stack:
        node, entering = stack.pop()
        if not entering:
            open_nodes.discard(node.identity)
            continue
        if node.identity in seen:
            if node.identity in open_nodes:
                cycle = cycle or node
            continue
        seen.add(node.identity)
        schema = node.schema
        if schema is True:
            continue
        if schema is False:
            return None
        if not isinstance(schema, dict):
            node.document.unsupported("schema", node.pointer, f"a subschema must be an object, not {schema!r}")
            continue
        pending: list[Node] = []
        overridden = False
        for keyword in REFERENCES:
            if keyword in schema:
                target = node.resolve(keyword)
                if target is not None:
                    pending.append(target)
                overridden = keyword == "$ref" and node.document.ref_overrides_siblings
        if not overridden:
            pending += [node.child(sub, "allOf", i) for i, sub in enumerate(schema.get("allOf", []))]
            if any(k not in ANNOTATIONS and k not in REFERENCES and k != "allOf" for k in schema):
                # Drop what was inlined, so flattening the result again is a no-op.
                inlined = any(k in schema for k in REFERENCES) or "allOf" in schema
                out.append(_without(node, ("allOf", *REFERENCES)) if inlined else node)
        open_nodes.add(node.identity)
        stack.append((node, False))
        stack.extend((child, True) for child in reversed(pending))
    if cycle is not None and not out:
        cycle.document.unsupported("$ref", cycle.pointer, "a reference cycle that never reaches a constraint")
    return out


def distribute(conjunction: Conjunction) -> list[Conjunction]:
    """Alternatives (conjunctions of plain nodes without disjunctive keywords) equivalent to the input."""
    flat = flatten(conjunction)
    if flat is None:
        return []
    for index, node in enumerate(flat):
        if not node.schema.keys().isdisjoint(DISJUNCTIVE):
            rest = [*flat[:index], _without(node, DISJUNCTIVE), *flat[index + 1:]]
            results: list[Conjunction] = [rest]
            for alternatives in _disjunctions(node):
                results = [r + alt for r in results for alt in alternatives]
                results = [r for r in results if allowed_types(r)]  # prune type clashes early
                if len(results) > MAX_ALTERNATIVES:
                    node.document.unsupported("anyOf", node.pointer,
                                              f"more than {MAX_ALTERNATIVES} combinations of alternatives")
                    return [rest]
            out: list[Conjunction] = []
            for result in results:
                out += distribute(result)
                if len(out) > MAX_ALTERNATIVES:
                    node.document.unsupported("anyOf", node.pointer,
                                              f"more than {MAX_ALTERNATIVES} combinations of alternatives")
                    return [rest]
            return out
    return [flat]


def _without(node: Node, keywords: tuple[str, ...]) -> Node:
    copy = {k: v for k, v in node.schema.items() if k not in keywords}
    return Node(copy, node.resolver, node.pointer, node.document, node.origin or node.schema)


def allowed_types(conjunction: Conjunction) -> frozenset[str]:
    """The internal types that every node's ``type``/``x-types`` allows."""
    types = VALUE_TYPES
    for node in conjunction:
        schema = node.schema
        if not isinstance(schema, dict):
            continue
        if "type" in schema:
            types = types & types_of(schema["type"])
        if "x-types" in schema:
            types = types & frozenset(schema["x-types"])
    return types


def _disjunctions(node: Node) -> Iterator[list[Conjunction]]:
    """Each disjunctive keyword of a node as its list of alternatives."""
    schema = node.schema
    if "anyOf" in schema:
        yield [[node.child(sub, "anyOf", i)] for i, sub in enumerate(schema["anyOf"])]
    if "oneOf" in schema:
        yield one_of([node.child(sub, "oneOf", i) for i, sub in enumerate(schema["oneOf"])])
    if "not" in schema:
        yield negate(node.child(schema["not"], "not"))
    if "if" in schema and ("then" in schema or "else" in schema):
        condition = node.child(schema["if"], "if")
        then = node.child(schema.get("then", True), "then")
        otherwise = node.child(schema.get("else", True), "else")
        yield [[condition, then]] + [[*alt, otherwise] for alt in negate(condition)]
    dependencies = dict(schema.get("dependencies", {}))
    dependencies.update(schema.get("dependentRequired", {}))
    dependencies.update(schema.get("dependentSchemas", {}))
    for key, dependency in dependencies.items():
        absent = node.synthetic({"properties": {key: False}})
        if isinstance(dependency, list):
            present = [node.synthetic({"required": [key, *dependency]})]
        else:
            keyword = "dependentSchemas" if "dependentSchemas" in schema else "dependencies"
            present = [node.synthetic({"required": [key]}), node.child(dependency, keyword, key)]
        yield [[absent], present]


MAX_ONE_OF_PRODUCT = 64


def one_of(branches: list[Node]) -> list[Conjunction]:
    """Exactly one branch holds: each branch with the negation of the others.

    Branches that are disjoint (by type, by constant values, or by a required discriminator
    property with distinct constants) need no negations. Otherwise the negations are tried; where
    one is not expressible, or the rewrite would explode, the branches are read as ``anyOf``: a
    superset, equal to ``oneOf`` whenever no instance satisfies two branches.
    """
    if len(branches) < 2 or _disjoint(branches):
        return [[b] for b in branches]
    document = branches[0].document
    try:
        with document.probing():
            negated = [negate(b) for b in branches]
    except UnsupportedSchemaError as exc:
        return _as_any_of(branches, f"its branches may overlap and one cannot be negated ({exc.keyword})")
    sizes = [max(len(n), 1) for n in negated]
    if any(math.prod(sizes[:i] + sizes[i + 1:]) > MAX_ONE_OF_PRODUCT for i in range(len(branches))):
        return _as_any_of(branches, "its branches may overlap and their negations are too many")
    nodes = [_dnf_node(b, alternatives) for b, alternatives in zip(branches, negated, strict=True)]
    return [[b, *(nodes[j] for j in range(len(branches)) if j != i)] for i, b in enumerate(branches)]


def _as_any_of(branches: list[Node], why: str) -> list[Conjunction]:
    """``oneOf`` read as ``anyOf``: a superset, reported (the parent's pointer names the keyword)."""
    parent = branches[0].pointer.rsplit("/oneOf/", 1)[0]
    branches[0].document.unsupported("oneOf", parent, why)
    return [[b] for b in branches]


def _dnf_node(at: Node, alternatives: list[Conjunction]) -> Node:
    if not alternatives:
        return at.synthetic({"x-types": []})
    return at.synthetic({"anyOf": [at.synthetic({"allOf": alt}) for alt in alternatives]})


def _disjoint(branches: list[Node]) -> bool:
    """Whether no value can satisfy two branches, by cheap sufficient tests."""
    flats = [flatten([b]) for b in branches]
    if any(f is None for f in flats):
        return False
    types = [allowed_types(f or []) for f in flats]
    if all(not (types[i] & types[j]) for i in range(len(types)) for j in range(i)):
        return True
    constants = [_constants(f or []) for f in flats]
    if all(c is not None for c in constants):
        seen: set[str] = set()
        for values in constants:
            assert values is not None
            if seen & values:
                return False
            seen |= values
        return True
    return _discriminated(flats)


def _constants(conj: Conjunction) -> set[str] | None:
    for node in conj:
        if "const" in node.schema:
            return {canonical(node.schema["const"])}
        if "enum" in node.schema:
            return {canonical(v) for v in node.schema["enum"]}
    return None


def _discriminated(flats: list[Conjunction | None]) -> bool:
    """A property every branch requires, whose constant values differ between branches."""
    per_branch: list[dict[str, set[str]]] = []
    for conj in flats:
        found: dict[str, set[str]] = {}
        required = {k for n in conj or [] for k in n.schema.get("required", [])}
        for n in conj or []:
            for key, sub in (n.schema.get("properties") or {}).items():
                if key in required and isinstance(sub, dict):
                    values = _constants([n.child(sub, "properties", key)])
                    if values is not None:
                        found[key] = values
        per_branch.append(found)
    common = set.intersection(*(set(f) for f in per_branch)) if per_branch else set()
    return any(_pairwise_apart([f[key] for f in per_branch]) for key in common)


def _pairwise_apart(value_sets: list[set[str]]) -> bool:
    seen: set[str] = set()
    for values in value_sets:
        if seen & values:
            return False
        seen |= values
    return True


def negation_node(node: Node) -> Node:
    """A node accepting exactly what ``node`` rejects (as far as :func:`negate` can say)."""
    alternatives = negate(node)
    if not alternatives:
        return node.synthetic({"x-types": []})
    return node.synthetic({"anyOf": [node.synthetic({"allOf": alt}) for alt in alternatives]})


def negate(node: Node) -> list[Conjunction]:
    """The complement of a node, in disjunctive normal form (``[]`` is false, ``[[]]`` is true)."""
    schema = node.schema
    if schema is True:
        return []
    if schema is False:
        return [[]]
    if not isinstance(schema, dict):
        return []
    negating = node.document.negating
    if node.identity in negating:
        node.document.unsupported("not", node.pointer, "the negation of a recursive schema")
        return [[]]
    negating.add(node.identity)
    try:
        return _negate_keywords(node)
    finally:
        negating.discard(node.identity)


def _negate_keywords(node: Node) -> list[Conjunction]:
    schema = node.schema
    alternatives: list[Conjunction] = []
    for keyword in REFERENCES:
        if keyword in schema:
            target = node.resolve(keyword)
            alternatives += negate(target) if target is not None else [[]]
            if keyword == "$ref" and node.document.ref_overrides_siblings:
                return alternatives
    for keyword, value in schema.items():
        if keyword in ANNOTATIONS or keyword in REFERENCES or keyword in ("then", "else"):
            continue
        alternatives += _negate_keyword(node, keyword, value)
    return alternatives


_NUMBER = ["integer", "fraction"]
_BOUND_NEGATIONS = {
    "minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
    "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1),
    "minProperties": ("object", "maxProperties", -1), "maxProperties": ("object", "minProperties", 1),
}


def _negate_keyword(node: Node, keyword: str, value: Any) -> list[Conjunction]:
    """The ways an instance can fail one keyword of ``node``."""
    syn = node.synthetic
    if keyword in ("type", "x-types"):
        kept = types_of(value) if keyword == "type" else frozenset(value)
        return [[syn({"x-types": sorted(VALUE_TYPES - kept)})]]
    if keyword in ("enum", "const"):
        return [[syn({"x-not-in": list(value) if keyword == "enum" else [value]})]]
    if keyword == "x-not-in":
        return [[syn({"enum": list(value)})]]
    if keyword in _BOUND_NEGATIONS:
        kind, other, shift = _BOUND_NEGATIONS[keyword]
        bound = int(value) + shift
        return [] if bound < 0 else [[syn({"x-types": [kind], other: bound})]]
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "x-lo", "x-hi"):
        return _negate_bound(node, keyword, value)
    if keyword == "required":
        return [[syn({"x-types": ["object"], "properties": {key: False}})] for key in value]
    if keyword == "properties":
        out: list[Conjunction] = []
        for key, sub in value.items():
            failing = negation_node(node.child(sub, "properties", key))
            out.append([syn({"x-types": ["object"], "required": [key], "properties": {key: failing}})])
        return out
    if keyword in ("items", "x-items") and not isinstance(value, list) and (
            keyword == "x-items" or not node.document.tuple_items or "prefixItems" not in node.schema):
        if keyword == "items" and "prefixItems" in node.schema:
            node.document.unsupported("not", node.pointer, "negation of items after prefixItems")
            return [[]]
        failing = negation_node(node.child(value, keyword))
        return [[syn({"x-types": ["array"], "contains": failing})]]
    if keyword == "contains" and "minContains" not in node.schema and "maxContains" not in node.schema:
        return [[syn({"x-types": ["array"], "x-items": negation_node(node.child(value, "contains"))})]]
    if keyword == "allOf":
        return [alt for i, sub in enumerate(value) for alt in negate(node.child(sub, "allOf", i))]
    if keyword in ("anyOf", "oneOf"):
        return [[negation_node(node.child(sub, keyword, i)) for i, sub in enumerate(value)]]
    if keyword == "not":
        return [[node.child(value, "not")]]
    if keyword == "if":
        condition = node.child(value, "if")
        then = negation_node(node.child(node.schema.get("then", True), "then"))
        otherwise = negation_node(node.child(node.schema.get("else", True), "else"))
        return [[condition, then]] + [[*alt, otherwise] for alt in negate(condition)]
    if keyword in ("format", "minContains", "maxContains"):
        return []  # format is an annotation here; min/maxContains are negated with their contains
    if keyword in _CONSTRAINTS:
        node.document.unsupported("not", node.pointer, f"the negation of {keyword!r} is not expressible")
        return [[]]
    return []  # an unknown keyword constrains nothing, so nothing fails it


def _negate_bound(node: Node, keyword: str, value: Any) -> list[Conjunction]:
    """The numbers beyond one bound (draft-04 boolean ``exclusive*`` modify ``minimum``/``maximum``)."""
    schema = node.schema
    if isinstance(value, bool):
        return []  # draft-04 flag: handled with its minimum/maximum
    if keyword in ("x-lo", "x-hi"):
        bound, inclusive = value
    else:
        bound = value
        inclusive = keyword in ("minimum", "maximum")
        if node.document.draft4 and keyword in ("minimum", "maximum"):
            flag = "exclusiveMinimum" if keyword == "minimum" else "exclusiveMaximum"
            inclusive = not schema.get(flag, False)
    lower = keyword in ("minimum", "exclusiveMinimum", "x-lo")
    flipped = "x-hi" if lower else "x-lo"
    return [[node.synthetic({"x-types": _NUMBER, flipped: [bound, not inclusive]})]]


_CONSTRAINTS = frozenset([
    "pattern", "format", "multipleOf", "uniqueItems", "patternProperties", "additionalProperties",
    "prefixItems", "additionalItems", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
    "dependentRequired", "dependentSchemas", "dependencies", "minContains", "maxContains", "contains",
    "items",
])
