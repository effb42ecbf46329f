"""Objects: named, pattern and additional keys, required keys and member counts.

Every member (key, colon, value) is a shared rule. When validating, objects accept their members
**in any order** (schema order is not a JSON Schema constraint, and models write keys in the order
they think of them): required keys are tracked exactly as the set seen so far while the states stay
few (a state per subset, times a member count when ``min``/``maxProperties`` ask), and beyond that
the rest are reported and not enforced. Known keys may repeat, which JSON allows and validators read
as the last value. When generating, the named keys come at most once each and in the schema's
order, every required one present, then keys of ``patternProperties``/``additionalProperties``; keys
the schema does not declare are left out unless only they can reach ``minProperties``.

Keys that no ``properties`` names are partitioned by the ``patternProperties`` they match
(:mod:`.regular`), and additional keys are the strings that spell no known key, so a known key never
dodges its own schema. ``unevaluatedProperties`` applies to what the in-place applicators leave
unevaluated (:mod:`.evaluation`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from codemask.grammar.ir import (
    MAX_CODE_POINT,
    NOTHING,
    Choice,
    Expr,
    Repeat,
    RuleRef,
    Sequence,
    char_class,
    choice,
    literal,
    seq,
)
from codemask.grammar.json_schema import regular, strings
from codemask.grammar.json_schema.algebra import Conjunction, distribute, flatten
from codemask.grammar.json_schema.constraints import Constraints
from codemask.grammar.json_schema.evaluation import (
    descendants,
    evaluated_elsewhere,
    evaluates_all,
    search,
    statically_evaluated,
)
from codemask.grammar.json_schema.nodes import Node
from codemask.grammar.json_schema.satisfies import satisfies
from codemask.grammar.json_schema.scalars import ScalarRules, pattern_content_at

MAX_REQUIRED_SET = 6
MAX_OBJECT_STATES = 256
MAX_OBJECT_ALTERNATIVES = 8192  # validation's required-key subsets times members
MAX_OBJECT_RULES = 20000  # generation's ordered object states
MAX_PATTERN_SUBSETS = 4  # patternProperties partitioned exactly up to this many patterns
_ANY_CODE_POINT = char_class([(0, MAX_CODE_POINT)])


class ObjectRules(ScalarRules):
    """The schema builder's rules for objects (their keys are built with the string rules)."""

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
            if key_expr is None:
                key_expr = self._property_names(c, known)
            members.append((None, self._named("m", seq(key_expr, lay.colon(), self.value(value_nodes, depth + 1)))))
        if self.generating:
            return self._object_in_order(members, c, depth)
        return self._object_states(members, c, depth)

    def _other_keys(self, c: Constraints, known: list[str]) -> list[tuple[Expr | None, Conjunction, bool]]:
        """(key, value nodes, additional) for keys no ``properties`` names: patterns, then additional ones.

        Without ``propertyNames``, the additional keys are exactly the strings that are not known
        keys (in any spelling), so a known key can never dodge its own schema. Their key is None
        here, built by `_property_names` only where the object keeps them (a closed object has no
        use for the complement of its keys, the largest rule of a small schema).
        """
        nodes = c.object_nodes
        restrictive = [n for n in nodes if _restricts_others(n) and not (_unevaluated_only(n) and (
            any(evaluates_all(m) for m in descendants(n, nodes)) or statically_evaluated(n).open_ended
            or statically_evaluated(n).patterns))]
        _report_property_names_overlap(c, known)
        if not restrictive:
            return [(None, [], True)]
        node = restrictive[0]
        if len(restrictive) > 1:
            if all(not n.get("patternProperties") and _additional(n) is False for n in restrictive):
                return []
            node.document.unsupported("additionalProperties", node.pointer,
                                      "additional or pattern properties constrained by several subschemas")
            return [(None, [], True)]
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
        out: list[tuple[Expr | None, Conjunction, bool]] = []
        for pattern, sub in patterns.items():
            content = pattern_content_at(pattern, node)
            if content is None:
                content = Repeat(_ANY_CODE_POINT, 0, None)
            key = seq(strings.QUOTE, self._named("s", strings.content_to_json(content)), strings.QUOTE)
            out.append((key, [node.child(sub, "patternProperties", pattern)], False))
        if additional is not False:
            out.append((None, [node.child(additional, keyword)], True))
        return out

    def _pattern_keys(self, node: Node, patterns: dict[str, Any], known: list[str], additional: Any,
                      keyword: str) -> list[tuple[Expr | None, Conjunction, bool]] | None:
        """Keys partitioned exactly by which patterns they match, None if the automaton is too large.

        A key matching several patterns must satisfy all their schemas; a key matching none (and
        not a named property) is additional. Works on JSON spellings, so ``ensure_ascii`` keys
        (``\\u00e9``) are classified by what they decode to.
        """
        contents = [pattern_content_at(p, node) for p in patterns]
        if any(c is None for c in contents) or len(patterns) > MAX_PATTERN_SUBSETS:
            return None
        operands: list[Expr] = [Repeat(strings.any_char(), 0, None),
                                *(strings.content_to_json(c) for c in contents if c is not None),
                                choice(*(strings.string_content(k) for k in known))]
        subs = [node.child(sub, "patternProperties", p) for p, sub in patterns.items()]
        count = len(subs)
        out: list[tuple[Expr | None, Conjunction, bool]] = []
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
        """JSON strings other than the known keys: one rule per set of keys, standalone (past the
        first byte that leaves every known key, its walks are any string's, in every schema)."""
        key = ("names", known)
        name = self._memo.get(key)
        if name is None:
            name = self._memo[key] = f"k{len(self._memo)}"
            self.rules[name] = self._spelled_other_than(list(known))
            if known:  # (else it is any string: the shared string rule itself)
                self.standalone.add(name)
        return RuleRef(name)

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
            flat = seq(lead)
            before = flat.items if isinstance(flat, Sequence) else (flat,)
            taken: set[tuple[Expr, int]] = set()
            for key, member in members:
                nxt = advance(state, key)
                if nxt is not None and (member, nxt) not in taken:
                    taken.add((member, nxt))  # (`seq(lead, member, ref(...))`, built directly: a member is a reference)
                    out.append(Sequence((*before, member, ref(nxt, nxt_count))) if type(member) is RuleRef
                               else seq(lead, member, ref(nxt, nxt_count)))
            return out

        first = steps(0, 0, lay.open(depth))
        while pending:
            state, count = pending.pop()
            options = steps(state, count, lay.comma(depth))
            if ready(state, count):
                options.append(lay.close(depth))
            self.rules[f"{base}{state}_{count}"] = _distinct_choice(options)
        alternatives = [seq(literal("{"), _distinct_choice(first), literal("}"))] if first else []
        if ready(0, 0):
            alternatives.append(seq(literal("{"), lay.empty(), literal("}")))
        return choice(*alternatives)


def _matches_exactly(bits: tuple[bool, ...], mask: int, count: int) -> bool:
    """Raw key (bit 0), matching exactly the patterns in ``mask`` (bits 1..count), not a known key."""
    in_universe, matched, is_known = bits[0], bits[1:count + 1], bits[count + 1]
    return in_universe and not is_known and all(matched[i] == bool(mask >> i & 1) for i in range(count))


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


def _distinct_choice(options: list[Expr]) -> Expr:
    """`choice` of ``options`` known to be distinct (an object state's steps: one per member and
    next state), without hashing them all again to find duplicates."""
    if len(options) < 2 or any(type(option) is Choice for option in options):
        return choice(*options)
    return Choice(tuple(options))


def _value_nodes_for(key: str, nodes: list[Node]) -> Conjunction | None:
    """What the value of ``key`` must satisfy under every node; None when a node forbids the key."""
    out: Conjunction = []
    for node in nodes:
        properties = node.get("properties") or {}
        matched = [node.child(sub, "patternProperties", p) for p, sub in (node.get("patternProperties") or {}).items()
                   if search(p, key)]
        out += matched  # a named property that matches a pattern must satisfy both
        if key in properties:
            out.append(node.child(properties[key], "properties", key))
            continue
        if matched:
            continue
        additional = _additional(node)
        if additional is not True and not (_unevaluated_only(node) and (
                evaluated_elsewhere(key, node, nodes) or statically_evaluated(node).covers(key))):
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
