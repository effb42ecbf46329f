"""Grammar normalisation before compilation.

The engine matches a grammar as a set of per-rule automata with calls between them (a recursive
transition network). That works for any context-free grammar except left recursion, whose
closure would push frames forever, and it is fastest when as few rules as possible remain
separate (a call is a frame the mask cache cannot see through). So before compiling we:

1. check that every referenced rule exists and drop rules the start rule cannot reach;
2. drop rules that derive no finite string at all (they can only reject);
3. remove left recursion (Lark grammars are full of ``sum: sum "+" product | product``), by
   Paull's substitution and the classic ``A: A a | b  =>  A: b a*`` rewrite;
4. inline every non-recursive rule that is small enough into its callers, so that only
   recursion (and very large regular rules) remain as calls;
5. turn large bounded repetitions into nested counting rules (`codemask.grammar.counting`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Set
from dataclasses import replace

from codemask.engine import native
from codemask.errors import GrammarError
from codemask.grammar.counting import count_large_repeats
from codemask.grammar.ir import (
    NOTHING,
    SURROGATES,
    ByteClass,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    choice,
    complement_ranges,
    normalize_ranges,
    references,
    seq,
    terminal_references,
)

# Rules whose inlined body would exceed this weight stay separate rules.
INLINE_WEIGHT_LIMIT = 4000
# A rule used in several places stays separate above this weight: inlining would copy its automaton
# (and the token-mask positions computed for every state of it) once per use. A keyword-excluding
# identifier (grammars/python_function.ebnf) used in eight places took 12 s to compile inlined.
SHARED_INLINE_WEIGHT_LIMIT = 500
# ... and above this total weight of all its copies (a JSON Schema object's member, referenced from
# every required-keys state, would otherwise be copied into each of them).
SHARED_INLINE_TOTAL_LIMIT = 400
# A rule whose inlined body would nest deeper than this stays separate: a chain of rules each
# calling the next, inlined, nested a thousand levels deep, past what the recursive walks over
# expressions (and their hashes) can take.
INLINE_DEPTH_LIMIT = 64


def optimize(ir: GrammarIR) -> GrammarIR:
    """Return an equivalent grammar ready for automaton construction (see module docstring)."""
    check_references(ir)
    rules = reachable_rules(ir.rules, ir.start)
    if not ir.productive:  # (a subset of productive rules, reachable from the start, is productive)
        rules = drop_unproductive(rules, ir.start)
    # (left recursion is a cycle of the call graph: a grammar without recursion, most JSON Schemas,
    # skips the search for it, and the inliner reuses the components)
    components = _strongly_connected(rules, lambda r: references(rules[r].body))
    recursive = _recursive(rules, components)
    if recursive:
        untangled = eliminate_left_recursion(rules, ir.start, recursive)
        if untangled is not rules:
            rules = untangled
            components = _strongly_connected(rules, lambda r: references(untangled[r].body))
            recursive = _recursive(rules, components)
    rules = count_large_repeats(inline_rules(rules, ir.start, components, recursive))
    return GrammarIR(rules=rules, start=ir.start, terminals=ir.terminals, ignore=ir.ignore)


def check_references(ir: GrammarIR) -> None:
    """Raise `GrammarError` naming the first undefined rule or terminal (a set comparison per rule:
    the names are sorted only to name the first one)."""
    rules, terminals = ir.rules.keys(), ir.terminals.keys()
    for rule in ir.rules.values():
        called = references(rule.body)
        if not rules >= called:
            raise GrammarError(f"rule {rule.name!r} references undefined rule {min(called - rules)!r}")
        lexed = terminal_references(rule.body)
        if not terminals >= lexed:
            raise GrammarError(f"rule {rule.name!r} references undefined terminal {min(lexed - terminals)!r}")


def reachable_rules(rules: dict[str, Rule], start: str) -> dict[str, Rule]:
    """The rules reachable from ``start``, in a stable order."""
    seen = {start}
    order = [start]
    for name in order:
        for ref in sorted(references(rules[name].body)):
            if ref not in seen:
                seen.add(ref)
                order.append(ref)
    return {name: rules[name] for name in order}


def _least_fixed_point(rules: dict[str, Rule], nullable: bool) -> set[str]:
    """The least set of rules whose body holds given the set, where a sequence holds when all its
    items do, a choice when one alternative does, a repetition when it may be empty or its item
    holds, a reference when its rule is in the set, and any other node as it derives a finite
    string (the productive rules) or, ``nullable``, the empty one.

    Each body is read once into and/or gates over references (the constant parts folded away);
    a rule joining the set then counts down the gates it feeds, so the whole costs one look at
    each node and each edge. Evaluating bodies again as their callees joined looked at a large
    rule once per callee. The C extension does the same (`native.least_fixed_point`): a third of
    a small schema's front-end and optimiser time was these walks in Python."""
    if native.enabled():
        index = {name: i for i, name in enumerate(rules)}
        holds = native.least_fixed_point([rule.body for rule in rules.values()], index, nullable)
        return {name for name, held in zip(rules, holds, strict=True) if held}
    graph = _Gates(rules, _nullable_leaf if nullable else _productive_leaf)
    found: set[str] = set()
    ready = [name for name, holds in graph.roots.items() if holds is True]
    while ready:
        name = ready.pop()
        if name not in found:
            found.add(name)
            ready.extend(graph.fire_all(graph.watchers.get(name, ())))
    return found


class _Gates:
    """The and/or gates of `_least_fixed_point`: ``need[g]`` inputs of gate ``g`` still to hold,
    ``outputs[g]`` the gates it feeds (``~i`` for the body of the ``i``-th rule)."""

    def __init__(self, rules: dict[str, Rule], leaf: Callable[[Expr], bool]) -> None:
        self.leaf = leaf
        self.names = list(rules)
        self.need: list[int] = []
        self.outputs: list[list[int]] = []
        self.watchers: dict[str, list[int]] = {}  # rule name -> the gates its references are
        self.memo: dict[int, bool | int] = {}  # id of a (shared) node -> its gate or constant
        self.roots: dict[str, bool | int] = {}
        for i, (name, rule) in enumerate(rules.items()):
            root = self.roots[name] = self.gate(rule.body)
            if root is not True and root is not False:
                self.outputs[root].append(~i)

    def new(self, need: int, inputs: Set[int]) -> int:
        gate = len(self.need)
        self.need.append(need)
        self.outputs.append([])
        for source in inputs:
            self.outputs[source].append(gate)
        return gate

    def gate(self, expr: Expr) -> bool | int:
        """True or False where ``expr`` holds or fails whatever the set, else its gate."""
        known = self.memo.get(id(expr))
        if known is not None:
            return known
        made: bool | int
        if isinstance(expr, RuleRef):
            made = self.new(1, frozenset())
            self.watchers.setdefault(expr.name, []).append(made)
        elif isinstance(expr, Sequence | Choice):
            made = self.combined(expr.items if isinstance(expr, Sequence) else expr.alternatives,
                                 isinstance(expr, Sequence))
        elif isinstance(expr, Repeat):
            made = expr.min == 0 or self.gate(expr.item)
        else:
            made = self.leaf(expr)
        self.memo[id(expr)] = made
        return made

    def combined(self, parts: tuple[Expr, ...], every: bool) -> bool | int:
        """The gate of all (``every``) or any of ``parts``; the parts after one that decides it
        whatever the set (a failing item, a holding alternative) are not read."""
        inputs: set[int] = set()
        for part in parts:
            made = self.gate(part)
            if made is (not every):
                return made
            if made is not every:
                inputs.add(made)
        if len(inputs) <= 1:
            return inputs.pop() if inputs else every
        return self.new(len(inputs) if every else 1, inputs)

    def fire_all(self, gates: Iterable[int]) -> list[str]:
        """Count down what ``gates`` (each holding now) feed; the rules whose body came to hold."""
        rules: list[str] = []
        stack = list(gates)
        while stack:
            for target in self.outputs[stack.pop()]:
                if target < 0:
                    rules.append(self.names[~target])
                    continue
                self.need[target] -= 1
                if self.need[target] == 0:
                    stack.append(target)
        return rules


def drop_unproductive(rules: dict[str, Rule], start: str) -> dict[str, Rule]:
    """Replace references to rules that derive no finite string by the empty choice."""
    productive = _least_fixed_point(rules, nullable=False)
    if start not in productive:
        raise GrammarError(f"the start rule {start!r} matches no finite string")
    if len(productive) == len(rules):
        return rules
    unproductive = {ref: NOTHING for rule in rules.values() for ref in references(rule.body) if ref not in productive}
    return {name: replace(rule, body=substitute(rule.body, unproductive)) for name, rule in rules.items()
            if name in productive}


def _productive_leaf(expr: Expr) -> bool:
    """Whether a node other than a sequence, choice, repetition or reference derives a string."""
    if isinstance(expr, CharClass):  # (a class of nothing but surrogates matches no UTF-8 either)
        ranges = complement_ranges(normalize_ranges(expr.ranges)) if expr.negated else normalize_ranges(expr.ranges)
        return any(lo < SURROGATES[0] or hi > SURROGATES[1] for lo, hi in ranges)
    if isinstance(expr, ByteClass):
        return bool(expr.ranges)
    return True


def _nullable_leaf(expr: Expr) -> bool:
    """Whether a node other than a sequence, choice, repetition or reference derives the empty string."""
    return isinstance(expr, Literal) and not expr.value


def substitute(expr: Expr, replacements: dict[str, Expr]) -> Expr:
    """``expr`` with each reference to a rule named in ``replacements`` replaced by its expression
    (in C where the extension is loaded: rebuilding in Python was most of the inliner's time)."""
    if native.enabled():
        return native.substitute(expr, replacements)
    return _substitute(expr, replacements)


def _substitute(expr: Expr, replacements: dict[str, Expr]) -> Expr:
    """`substitute` in Python: ``expr`` rebuilt where a reference is replaced, the same object where
    none is (rebuilding unchanged trees was most of the optimiser's time)."""
    if isinstance(expr, RuleRef):
        return replacements.get(expr.name, expr)
    if isinstance(expr, Sequence):
        items = _substituted(expr.items, replacements)
        if items is None:
            return expr
        return NOTHING if any(item == NOTHING for item in items) else seq(*items)
    if isinstance(expr, Choice):
        alts = _substituted(expr.alternatives, replacements)
        if alts is None:
            return expr
        alts = [a for a in alts if a != NOTHING]
        return choice(*alts) if alts else NOTHING
    if isinstance(expr, Repeat):
        item = _substitute(expr.item, replacements)
        if item is expr.item:
            return expr
        if item == NOTHING:
            return seq() if expr.min == 0 else NOTHING
        return Repeat(item, expr.min, expr.max)
    return expr


def _substituted(parts: tuple[Expr, ...], replacements: dict[str, Expr]) -> list[Expr] | None:
    """`_substitute` of each part, or None where every part is unchanged."""
    out: list[Expr] | None = None
    for i, part in enumerate(parts):
        new = _substitute(part, replacements)
        if out is None and new is not part:
            out = list(parts[:i])
        if out is not None:
            out.append(new)
    return out


# ----------------------------------------------------------------------------- nullability

def nullable_rules(rules: dict[str, Rule]) -> set[str]:
    """Rules that derive the empty string."""
    return _least_fixed_point(rules, nullable=True)


def is_nullable(expr: Expr, nullable: set[str]) -> bool:
    if isinstance(expr, Literal):
        return not expr.value
    if isinstance(expr, RuleRef):
        return expr.name in nullable
    if isinstance(expr, Sequence):
        return all(is_nullable(item, nullable) for item in expr.items)
    if isinstance(expr, Choice):
        return any(is_nullable(alt, nullable) for alt in expr.alternatives)
    if isinstance(expr, Repeat):
        return expr.min == 0 or is_nullable(expr.item, nullable)
    return False  # classes and terminals consume input


def left_calls(expr: Expr, nullable: set[str]) -> set[str]:
    """Rules that ``expr`` may call before consuming any input (in C where the extension is loaded:
    the walks of every rule's left edge were most of the left-recursion check)."""
    if native.enabled():
        return native.left_calls(expr, nullable)
    return _left_calls(expr, nullable)


def _left_calls(expr: Expr, nullable: set[str]) -> set[str]:
    if isinstance(expr, RuleRef):
        return {expr.name}
    if isinstance(expr, Sequence):
        found: set[str] = set()
        for item in expr.items:
            found |= _left_calls(item, nullable)
            if not is_nullable(item, nullable):
                break
        return found
    if isinstance(expr, Choice):
        return set().union(*(_left_calls(alt, nullable) for alt in expr.alternatives)) if expr.alternatives else set()
    if isinstance(expr, Repeat):
        return _left_calls(expr.item, nullable) if expr.max != 0 else set()
    return set()


# ----------------------------------------------------------------------------- left recursion

def eliminate_left_recursion(rules: dict[str, Rule], start: str, recursive: Set[str] | None = None) -> dict[str, Rule]:
    """Rewrite left-recursive rules into equivalent right-iterative ones.

    Only the language matters to the engine (it builds no parse trees), so ``A: A a | b`` becomes
    ``A: b a*``; indirect cycles are first turned into direct ones by substituting the earlier
    rules of the cycle (Paull's algorithm). Left recursion hidden behind a nullable prefix that
    this cannot untangle raises `GrammarError` naming the rule.

    ``recursive``: the rules that can call themselves, where the caller knows them. A left
    recursion is a cycle of calls, so the search for one looks at their left calls only (a JSON
    Schema's grammar has a few, its generic JSON value, among hundreds of rules).
    """
    nullable = nullable_rules(rules)
    candidates = rules if recursive is None else {name: rule for name, rule in rules.items() if name in recursive}
    cycles = [c for c in _strongly_connected(candidates, lambda r: left_calls(rules[r].body, nullable))
              if len(c) > 1 or c[0] in left_calls(rules[c[0]].body, nullable)]
    if not cycles:
        return rules
    out = dict(rules)
    for component in cycles:
        members = sorted(component, key=list(rules).index)
        for i, name in enumerate(members):
            alts = _alternatives(out[name].body, name)
            for earlier in members[:i]:
                alts = _substitute_leading(alts, earlier, _alternatives(out[earlier].body, earlier))
            out[name] = replace(out[name], body=_remove_direct(name, alts, nullable))
    nullable = nullable_rules(out)
    for name in out:
        if name in left_calls(out[name].body, nullable) or _left_reaches(out, name, nullable):
            raise GrammarError(
                f"rule {name!r} is left-recursive through a rule that can match the empty string; "
                "rewrite it without left recursion"
            )
    return out


def _left_reaches(rules: dict[str, Rule], name: str, nullable: set[str]) -> bool:
    seen: set[str] = set()
    todo = list(left_calls(rules[name].body, nullable))
    while todo:
        cur = todo.pop()
        if cur == name:
            return True
        if cur in seen or cur not in rules:
            continue
        seen.add(cur)
        todo.extend(left_calls(rules[cur].body, nullable))
    return False


def _alternatives(expr: Expr, rule: str) -> list[tuple[Expr, ...]]:
    """The body as alternatives of item sequences, distributing leading choices and repeats."""
    result: list[tuple[Expr, ...]] = []
    for alt in expr.alternatives if isinstance(expr, Choice) else (expr,):
        items = alt.items if isinstance(alt, Sequence) else (alt,)
        result.extend(_expand_leading(items, depth=0, rule=rule))
    return result


def _expand_leading(items: tuple[Expr, ...], depth: int, rule: str) -> list[tuple[Expr, ...]]:
    if not items or depth > 8:
        return [items]
    head, rest = items[0], items[1:]
    if isinstance(head, Sequence):
        return _expand_leading(head.items + rest, depth + 1, rule)
    if isinstance(head, Choice):
        out: list[tuple[Expr, ...]] = []
        for alt in head.alternatives:
            alt_items = alt.items if isinstance(alt, Sequence) else (alt,)
            out.extend(_expand_leading(alt_items + rest, depth + 1, rule))
        return out
    if isinstance(head, Repeat) and head.max != 0:
        # x{m,n} rest  =  x x{m-1,n-1} rest  |  rest (when m == 0)
        lower = max(head.min - 1, 0)
        upper = None if head.max is None else head.max - 1
        tail = (Repeat(head.item, lower, upper),) if upper != 0 else ()
        out = _expand_leading((head.item, *tail, *rest), depth + 1, rule)
        if head.min == 0:
            out += _expand_leading(rest, depth + 1, rule)
        return out
    return [items]


def _substitute_leading(
    alts: list[tuple[Expr, ...]], name: str, replacement: list[tuple[Expr, ...]]
) -> list[tuple[Expr, ...]]:
    out: list[tuple[Expr, ...]] = []
    for items in alts:
        if items and items[0] == RuleRef(name):
            out.extend(rep + items[1:] for rep in replacement)
        else:
            out.append(items)
    return out


def _remove_direct(name: str, alts: list[tuple[Expr, ...]], nullable: set[str]) -> Expr:
    recursive = [items[1:] for items in alts if items and items[0] == RuleRef(name)]
    base = [items for items in alts if not (items and items[0] == RuleRef(name))]
    if not recursive:
        return choice(*(seq(*items) for items in base)) if base else NOTHING
    if not base:
        raise GrammarError(f"rule {name!r} is left-recursive with no non-recursive alternative: it matches nothing")
    head = choice(*(seq(*items) for items in base))
    # A: A a A | b (a binary operator written ambiguously) is b (a b)*: replacing the trailing
    # self-reference by the base keeps the language and removes an exponential ambiguity
    tails = [seq(*items[:-1], head) if items[-1] == RuleRef(name) else seq(*items) for items in recursive if items]
    return seq(head, Repeat(choice(*tails), 0, None)) if tails else head


def _strongly_connected(rules: dict[str, Rule], edges: Callable[[str], Set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), over rule names: a component comes
    after every component it has edges into (callees first). In C where the extension is loaded
    (the walk over tens of thousands of calls of a large schema); what callers do with the
    components does not depend on the order of independent ones, nor on that within one."""
    if native.enabled():
        names = list(rules)
        number = {name: i for i, name in enumerate(names)}
        found = native.strongly_connected([[number[e] for e in edges(name) if e in number] for name in names])
        return [[names[i] for i in component] for component in found]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in rules:
        if root in index:
            continue
        work = [(root, iter(sorted(e for e in edges(root) if e in rules)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(e for e in edges(child) if e in rules))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


# ----------------------------------------------------------------------------- inlining

def _recursive(rules: dict[str, Rule], components: list[list[str]]) -> set[str]:
    """The rules of the call graph's strongly connected ``components`` that can call themselves."""
    found: set[str] = set()
    for component in components:
        if len(component) > 1 or component[0] in references(rules[component[0]].body):
            found.update(component)
    return found


def expr_size(expr: Expr, inlined: dict[str, tuple[int, int, type]]) -> tuple[int, int, type]:
    """`expr_weight`, nesting depth and top node type of ``expr`` once the rules of ``inlined``
    (name -> the same of their bodies) are inlined into it; other references weigh 1. A sequence
    inlined into a sequence (a choice into a choice) is spliced into it, as `seq` and `choice` do,
    so it adds no level."""
    if isinstance(expr, RuleRef):
        return inlined.get(expr.name, (1, 1, RuleRef))
    if isinstance(expr, Sequence | Choice):
        kind = type(expr)
        parts = [expr_size(item, inlined) for item in (expr.items if isinstance(expr, Sequence) else expr.alternatives)]
        depth = max((d - 1 if k is kind else d for _w, d, k in parts), default=0)
        return 1 + sum(w for w, _d, _k in parts), 1 + depth, kind
    if isinstance(expr, Repeat):
        weight, depth, _kind = expr_size(expr.item, inlined)
        copies = max(expr.min, 1) if expr.max is None else max(expr.max, 1)
        return 1 + copies * weight, 1 + depth, Repeat
    return expr_weight(expr), 1, type(expr)


def expr_weight(expr: Expr) -> int:
    """A rough size of the automaton an expression turns into."""
    if isinstance(expr, Literal):
        return max(len(expr.value), 1)
    if isinstance(expr, CharClass | ByteClass):
        return 1 + len(expr.ranges)
    if isinstance(expr, Sequence):
        return 1 + sum(expr_weight(i) for i in expr.items)
    if isinstance(expr, Choice):
        return 1 + sum(expr_weight(a) for a in expr.alternatives)
    if isinstance(expr, Repeat):
        copies = max(expr.min, 1) if expr.max is None else max(expr.max, 1)
        return 1 + copies * expr_weight(expr.item)
    return 1


def inline_rules(rules: dict[str, Rule], start: str, components: list[list[str]] | None = None,
                 recursive: set[str] | None = None) -> dict[str, Rule]:
    """Inline non-recursive rules (bottom-up) unless they grow beyond `INLINE_WEIGHT_LIMIT`.

    Rules with a lookahead assertion keep their identity (their lookahead belongs to them), and
    so do shared and standalone rules (`Rule.shared`, `Rule.standalone`: positions walked in a frame
    of their own). ``components``: the call graph's strongly connected components, where the
    caller has them already, and ``recursive`` (`_recursive` of them) too.
    """
    # (the components come callees first: non-recursive callees before their callers)
    if components is None:
        components = _strongly_connected(rules, lambda r: references(rules[r].body))
    keep = (_recursive(rules, components) if recursive is None else set(recursive)) | {start}
    keep |= {n for n, r in rules.items() if r.lookahead is not None or r.shared or r.standalone}
    uses: Counter[str] = Counter()
    in_c = native.enabled()  # (the measures in C: three walks of every body were most of the inliner)
    for rule in rules.values():
        if in_c:
            native.rule_uses(rule.body, uses)
        else:
            _count_uses(rule.body, uses)
    bodies: dict[str, Expr] = {}
    inlined: dict[str, Expr] = {}  # the bodies of the rules inlined so far
    order = [name for component in components for name in component]
    sizes: dict[str, tuple[int, int, type]] = {}  # an inlined rule's body: `expr_size`
    for name in order:
        body = substitute(rules[name].body, inlined)
        bodies[name] = body
        limit = INLINE_WEIGHT_LIMIT
        if uses[name] > 1:
            limit = min(SHARED_INLINE_WEIGHT_LIMIT, SHARED_INLINE_TOTAL_LIMIT // uses[name])
        # measured on the rule's own body with each inlined callee's size: measuring the inlined
        # body walked every callee again (quadratic along a chain of rules)
        if name in keep:
            continue
        size = native.expr_size(rules[name].body, sizes) if in_c else expr_size(rules[name].body, sizes)
        if size[0] > limit or size[1] > INLINE_DEPTH_LIMIT:
            keep.add(name)
        else:
            sizes[name] = size
            inlined[name] = body
    return {name: replace(rules[name], body=bodies[name]) for name in rules if name in keep}


def _count_uses(expr: Expr, uses: Counter[str]) -> None:
    """Add to ``uses`` every rule reference in ``expr``, once per copy the automaton will hold."""
    stack: list[tuple[Expr, int]] = [(expr, 1)]
    while stack:
        node, copies = stack.pop()
        if isinstance(node, RuleRef):
            uses[node.name] += copies
        elif isinstance(node, Sequence):
            stack.extend((item, copies) for item in node.items)
        elif isinstance(node, Choice):
            stack.extend((alt, copies) for alt in node.alternatives)
        elif isinstance(node, Repeat):
            # the automaton unrolls a bounded repetition: each copy is a use of the rules inside
            unrolled = max(node.min, 1) + 1 if node.max is None else max(node.max, 1)
            stack.append((node.item, copies * unrolled))
