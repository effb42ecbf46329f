"""The optimiser's grammar analyses against plain definitions: productive and nullable rules as the
least fixed point found by evaluating every body again until nothing changes (Kleene iteration),
on real grammars of every front-end and on random grammars full of shared and repeated nodes."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

import lark
import pytest

import oracle  # the reference recognizer lives in tests/
from codemask import Grammar
from codemask.engine import native
from codemask.errors import GrammarError
from codemask.grammar.ir import (
    EMPTY,
    NOTHING,
    SURROGATES,
    ByteClass,
    CharClass,
    Choice,
    Expr,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    TerminalRef,
    references,
    seq,
)
from codemask.grammar.optimize import drop_unproductive, inline_rules, left_calls, nullable_rules, optimize
from tests.data_paths import TEST_DATA

ROOT = Path(__file__).resolve().parents[2]


def holds(expr: Expr, found: set[str], nullable: bool) -> bool:
    """Whether ``expr`` derives a string (the empty one where ``nullable``) given the rules ``found``."""
    if isinstance(expr, RuleRef):
        return expr.name in found
    if isinstance(expr, Sequence):
        return all([holds(item, found, nullable) for item in expr.items])
    if isinstance(expr, Choice):
        return any([holds(alt, found, nullable) for alt in expr.alternatives])
    if isinstance(expr, Repeat):
        return expr.min == 0 or holds(expr.item, found, nullable)
    if nullable:
        return isinstance(expr, Literal) and not expr.value
    if isinstance(expr, CharClass):  # a code point that is no surrogate, in the ranges (or out of them)
        if not expr.negated:
            return any(lo <= hi and (lo < SURROGATES[0] or hi > SURROGATES[1]) for lo, hi in expr.ranges)
        probes = {0, SURROGATES[0] - 1, SURROGATES[1] + 1, 0x10FFFF}  # every gap has one of these at an end
        probes |= {hi + 1 for _, hi in expr.ranges} | {lo - 1 for lo, _ in expr.ranges}
        return any(0 <= p <= 0x10FFFF and not SURROGATES[0] <= p <= SURROGATES[1]
                   and not any(lo <= p <= hi for lo, hi in expr.ranges) for p in probes)
    if isinstance(expr, ByteClass):
        return bool(expr.ranges)
    return True


def kleene(rules: dict[str, Rule], nullable: bool) -> set[str]:
    found: set[str] = set()
    while True:
        grown = {name for name, rule in rules.items() if holds(rule.body, found, nullable)}
        if grown == found:
            return found
        found = grown


def real_grammars() -> list[Grammar]:
    grammars = [Grammar.builtin(name) for name in ("json", "sql", "python", "c", "go", "java", "javascript")]
    grammars.append(Grammar.from_ebnf((ROOT / "grammars" / "python_function.ebnf").read_text()))
    for path in sorted((TEST_DATA / "jsonschemabench").glob("*.json"))[::7]:
        schema = json.loads(path.read_text())["schema"]
        for mode in ("generate", "validate"):
            with contextlib.suppress(GrammarError):
                grammars.append(Grammar.from_json_schema(schema, mode=mode))
    return grammars


@pytest.mark.parametrize("in_c", [True, False])
def test_productive_and_nullable_rules_of_real_grammars_are_the_kleene_fixed_points(in_c: bool) -> None:
    """In C (`native.least_fixed_point`) and in Python."""
    checked = 0
    with native.using(in_c):
        for grammar in real_grammars():
            rules = grammar.ir.rules
            assert nullable_rules(rules) == kleene(rules, nullable=True)
            productive = kleene(rules, nullable=False)
            kept = drop_unproductive(rules, grammar.ir.start)
            assert set(kept) == productive or (kept is rules and productive == set(rules))
            checked += len(rules)
    assert checked > 2000


def random_grammar(rng: random.Random, size: int) -> dict[str, Rule]:
    """Rules over a few names (some undefined), with nodes reused by identity across bodies."""
    names = [f"r{i}" for i in range(size)]
    leaves: list[Expr] = [Literal(b"a"), EMPTY, NOTHING, ByteClass(()), ByteClass(((1, 2),)), TerminalRef("T"),
                          CharClass((SURROGATES,)), CharClass((SURROGATES,), True), CharClass(((0, 0x10FFFF),), True),
                          CharClass(((0, SURROGATES[0] - 1), (SURROGATES[1] + 1, 0x10FFFF)), True),
                          CharClass(((0x41, 0x5A), SURROGATES))]
    made: list[Expr] = []

    def expr(depth: int) -> Expr:
        roll = rng.random()
        if made and roll < 0.15:
            return rng.choice(made)  # the same object again: a shared subtree
        if depth == 0 or roll < 0.45:
            node = RuleRef(rng.choice([*names, "undefined"])) if rng.random() < 0.5 else rng.choice(leaves)
        elif roll < 0.65:
            node = Sequence(tuple(expr(depth - 1) for _ in range(rng.randint(0, 4))))
        elif roll < 0.85:
            node = Choice(tuple(expr(depth - 1) for _ in range(rng.randint(0, 4))))
        else:
            node = Repeat(expr(depth - 1), rng.choice([0, 0, 1, 2]), rng.choice([None, 3]))
        made.append(node)
        return node

    return {name: Rule(name, expr(4)) for name in names}


@pytest.mark.parametrize("in_c", [True, False])
@pytest.mark.parametrize("seed", range(300))
def test_productive_and_nullable_rules_of_random_grammars_are_the_kleene_fixed_points(seed: int, in_c: bool) -> None:
    rules = random_grammar(random.Random(seed), 1 + seed % 12)
    with native.using(in_c):
        assert nullable_rules(rules) == kleene(rules, nullable=True)
        productive = kleene(rules, nullable=False)
        if "r0" not in productive:
            with pytest.raises(GrammarError, match="matches no finite string"):
                drop_unproductive(rules, "r0")
        else:
            assert set(drop_unproductive(rules, "r0")) == productive


def test_the_optimisers_measures_in_c_are_the_python_ones() -> None:
    """`native.rule_uses`, `native.expr_size` (with callee sizes to splice in), `native.left_calls`,
    `native.expr_names` and `native.substitute` against `_count_uses`, `expr_size`, `_left_calls`,
    the references' walk and `_substitute`, over real and random grammars; and the optimised
    grammar is the same either way."""
    from collections import Counter

    from codemask.grammar.ir import _walk_names
    from codemask.grammar.optimize import _count_uses, _left_calls, _substitute, expr_size, optimize

    grammars = [grammar.ir.rules for grammar in real_grammars()]
    grammars += [random_grammar(random.Random(seed), 1 + seed % 12) for seed in range(200)]
    compared = 0
    for rules in grammars:
        sizes = {name: expr_size(rule.body, {}) for name, rule in list(rules.items())[::2]}
        with native.using(False):
            nullable = nullable_rules(rules)
        # references replaced by other bodies, by nothing (dropping alternatives, voiding sequences
        # and repetitions) and by the empty string
        names = sorted(rules)
        replacements = {name: [rules[names[-1 - i]].body, NOTHING, EMPTY][i % 3] for i, name in enumerate(names[::2])}
        for rule in rules.values():
            assert native.left_calls(rule.body, nullable) == _left_calls(rule.body, nullable)
            assert native.expr_names(rule.body) == _walk_names(rule.body)
            assert native.substitute(rule.body, replacements) == _substitute(rule.body, replacements)
            python: Counter[str] = Counter()
            _count_uses(rule.body, python)
            in_c: dict[str, int] = {}
            native.rule_uses(rule.body, in_c)
            assert in_c == dict(python)
            assert native.expr_size(rule.body, sizes) == expr_size(rule.body, sizes)
            compared += 1
    assert compared > 3000
    for grammar in real_grammars()[::3]:
        with native.using(True):
            fast = optimize(grammar.ir)
        with native.using(False):
            slow = optimize(grammar.ir)
        assert fast.rules == slow.rules


def test_the_call_graphs_components_in_c_are_tarjans_in_python() -> None:
    """`native.strongly_connected` against the Python Tarjan over real and random grammars' call
    graphs: the same components, each after every component it calls (the order the inliner needs)."""
    from codemask.grammar.optimize import _strongly_connected

    graphs = [grammar.ir.rules for grammar in real_grammars()]
    graphs += [random_grammar(random.Random(seed), 1 + seed % 12) for seed in range(200)]
    cyclic = 0
    for rules in graphs:
        def calls(name: str, rules: dict[str, Rule] = rules) -> frozenset[str]:
            return references(rules[name].body)

        with native.using(True):
            fast = _strongly_connected(rules, calls)
        with native.using(False):
            slow = _strongly_connected(rules, calls)
        assert {frozenset(c) for c in fast} == {frozenset(c) for c in slow}
        assert sorted(name for c in fast for name in c) == sorted(rules)
        position = {name: k for k, component in enumerate(fast) for name in component}
        assert all(position[callee] <= position[name] for name in rules for callee in calls(name) if callee in rules)
        cyclic += any(len(c) > 1 for c in fast)
    assert cyclic > 10


def test_bad_call_graphs_raise_instead_of_reading_out_of_bounds() -> None:
    with pytest.raises(IndexError):
        native.strongly_connected([[1], [2]])
    with pytest.raises(TypeError):
        native.strongly_connected([(0,)])  # type: ignore[list-item]
    assert native.strongly_connected([[0], [0, 2], [1]]) == [[0], [2, 1]]


def test_standalone_rules_keep_their_identity_where_their_twins_are_inlined() -> None:
    body = Sequence((Literal(b'"'), Repeat(CharClass(((0x61, 0x7A),)), 0, None), Literal(b'"')))
    rules = {"root": Rule("root", Sequence((RuleRef("key"), Literal(b":"), RuleRef("twin")))),
             "key": Rule("key", body, standalone=True), "twin": Rule("twin", body)}
    kept = inline_rules(rules, "root")
    assert set(kept) == {"root", "key"} and kept["key"].standalone
    assert kept["root"].body == seq(RuleRef("key"), Literal(b":"), body)


def test_a_validating_schemas_key_complement_is_a_standalone_rule_of_the_optimised_grammar() -> None:
    """The keys an object does not name are a rule of their own (their walks are shared by shape
    between schemas), also after the optimiser; generating, closed objects have none."""
    schema = {"type": "object", "properties": {"shape": {"type": "string"}, "size": {"type": "integer"}}}
    validating = optimize(Grammar.from_json_schema(schema, mode="validate").ir)
    standalone = [rule for rule in validating.rules.values() if rule.standalone]
    assert len(standalone) == 1 and not standalone[0].shared
    assert any(standalone[0].name in references(rule.body) for rule in validating.rules.values())
    generating = optimize(Grammar.from_json_schema(schema, mode="generate").ir)
    assert not any(rule.standalone for rule in generating.rules.values())


def test_left_recursion_is_found_through_the_call_graphs_cycles_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """optimize() looks for left recursion only in grammars whose call graph has a cycle: an
    indirect left recursion is still rewritten (the language kept, checked by a parser), a left
    recursion hidden behind a rule that can be empty is still refused by name, and a grammar whose
    recursion is not on the left keeps it."""
    from codemask.grammar import optimize as optimiser

    searched: list[str] = []
    search = optimiser.eliminate_left_recursion
    monkeypatch.setattr(optimiser, "eliminate_left_recursion",
                        lambda rules, start, recursive=None: searched.append(start) or search(rules, start, recursive))
    optimize(Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}}).ir)
    assert searched == []  # (no recursion: no search)
    indirect = 'root ::= a\na ::= b "x" | "y"\nb ::= a "z" | "w"\n'
    rewritten = optimize(Grammar.from_ebnf(indirect).ir)
    assert searched == ["root"]
    nullable = nullable_rules(rewritten.rules)
    assert not any(left_calls(rule.body, nullable) for rule in rewritten.rules.values())
    parser = lark.Lark('start: a\na: b "x" | "y"\nb: a "z" | "w"\n', parser="earley", lexer="dynamic")
    for text in ["y", "wx", "yzx", "wxzx", "yzxzx", "yz", "x", "wxz", ""]:
        try:
            parser.parse(text)
            expected = True
        except lark.exceptions.LarkError:
            expected = False
        assert oracle.accepts(rewritten, text.encode()) is expected, text
    with pytest.raises(GrammarError, match="'root' is left-recursive through a rule that can match the empty"):
        optimize(Grammar.from_ebnf('root ::= x root "a" | "b"\nx ::= "" | "c"\n').ir)
    nested = optimize(Grammar.from_ebnf('root ::= "[" item* "]"\nitem ::= "a" | root\n').ir)
    assert "root" in references(nested.rules["item"].body)


@pytest.mark.parametrize("grammar", [
    Grammar.builtin("json"),
    Grammar.from_ebnf('root ::= a\na ::= b "x" | "y"\nb ::= a "z" | "w"\n'),
    Grammar.from_ebnf('root ::= expr\nexpr ::= expr "+" term | term\nterm ::= term "*" atom | atom\n'
                      'atom ::= "(" expr ")" | [0-9]+\n'),
    Grammar.from_json_schema({"type": "object", "properties": {"child": {"$ref": "#"}, "n": {"type": "integer"}},
                              "additionalProperties": True}, mode="validate"),
])
def test_the_left_recursion_search_within_the_recursive_rules_rewrites_as_the_whole_search(grammar: Grammar) -> None:
    """Left recursion is a cycle of calls: searching the recursive rules' left calls only (what
    optimize() does) rewrites exactly as searching every rule's."""
    from codemask.grammar.optimize import _recursive, _strongly_connected, eliminate_left_recursion

    rules = grammar.ir.rules
    recursive = _recursive(rules, _strongly_connected(rules, lambda r: references(rules[r].body)))
    assert recursive
    start = grammar.ir.start
    assert eliminate_left_recursion(rules, start, recursive) == eliminate_left_recursion(rules, start)
