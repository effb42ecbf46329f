"""What in-place applicators evaluate, which ``unevaluatedProperties``/``unevaluatedItems`` leave alone.

Those two keywords constrain only the properties and items that nothing else evaluated: the node's
own ``properties``, ``patternProperties``, ``additionalProperties``, ``prefixItems``, ``items`` and
``contains``, and those of the subschemas applied in place (``allOf``, ``$ref``, the branches of
``anyOf``, ``oneOf`` and ``if``). The array and object rules read that from the schema alone
(:func:`statically_evaluated`) or from the nodes of the conjunction being built
(:func:`descendants`, :func:`evaluated_elsewhere`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re

from codemask.errors import UnsupportedSchemaError
from codemask.grammar.json_schema import strings
from codemask.grammar.json_schema.nodes import Node
from codemask.grammar.json_schema.satisfies import is_synthetic


@dataclasses.dataclass
class Evaluated:
    """What the in-place applicators under a node may evaluate, read from the schema alone.

    ``unevaluatedProperties``/``unevaluatedItems`` only constrain what nothing else evaluated.
    ``allOf`` and ``$ref`` always apply; any ``anyOf`` branch may hold alongside the one an
    alternative chose, so all count (erring on "evaluated": the keyword is applied less, never
    wrongly), and so does a lone ``if``. ``oneOf``, ``if``/``then``/``else`` and
    ``dependentSchemas`` need no guess: the compiler's alternatives hold exactly the branches that
    apply, and :func:`descendants` reads their annotations.
    """

    keys: set[str] = dataclasses.field(default_factory=set)
    patterns: set[str] = dataclasses.field(default_factory=set)
    open_ended: bool = False  # some subschema evaluates every property
    prefix: int = 0
    all_items: bool = False
    guessed: bool = False  # an ``anyOf`` branch or a lone ``if`` evaluated something (read as always)

    def covers(self, key: str) -> bool:
        return self.open_ended or key in self.keys or any(search(p, key) for p in self.patterns)


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
    found.prefix = max(found.prefix, prefix_length(node))
    rest = "items" in schema and not (node.document.tuple_items and isinstance(schema["items"], list))
    if rest or "additionalItems" in schema or "contains" in schema or (
            not is_root and schema.get("unevaluatedItems", False) is not False):
        found.all_items = True


def prefix_length(node: Node) -> int:
    schema = node.schema
    if "prefixItems" in schema:
        return len(schema["prefixItems"])
    if node.document.tuple_items and isinstance(schema.get("items"), list):
        return len(schema["items"])
    return 0


def evaluates_all(node: Node) -> bool:
    """Whether a node evaluates every property (so others' ``unevaluatedProperties`` see none left)."""
    schema = node.schema
    return "additionalProperties" in schema or schema.get("unevaluatedProperties", False) is not False


def descendants(node: Node, nodes: list[Node]) -> list[Node]:
    """The user-written nodes of the conjunction that sit under ``node``'s in-place applicators.

    Only their annotations reach ``node``'s ``unevaluated*``: a sibling's or a parent's do not,
    and the compiler's own nodes (negations of failing branches) carry none.
    """
    inside = node.pointer + "/"
    return [n for n in nodes if n is not node and n.pointer.startswith(inside) and not is_synthetic(n.schema)]


def evaluated_elsewhere(key: str, node: Node, nodes: list[Node]) -> bool:
    """Whether a subschema applied under ``node`` evaluates ``key`` (names it, matches it, or takes all)."""
    for other in descendants(node, nodes):
        if key in (other.get("properties") or {}) or evaluates_all(other):
            return True
        if any(search(p, key) for p in other.get("patternProperties") or {}):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(strings.ecma_to_python(pattern))
    except re.error:
        return None


def search(pattern: str, key: str) -> bool:
    compiled = _compiled(pattern)
    return compiled is not None and compiled.search(key) is not None
