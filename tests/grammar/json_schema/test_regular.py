"""Boolean combinations of regular languages, checked against Python's re on many strings."""

from __future__ import annotations

import itertools
import random
import re

from codemask.engine.automaton import BYTE_ALPHABET, compile_expr
from codemask.engine.recognizer import Recognizer
from codemask.grammar.grammar import Grammar
from codemask.grammar.ir import NOTHING, Expr, GrammarIR, Rule, literal
from codemask.grammar.json_schema import regular
from codemask.grammar.regex import regex_to_expr

PATTERNS = ["^a+b", "b$", "[0-9]{2}", "^(ab|ba)*$"]
WORDS = ["".join(p) for n in range(6) for p in itertools.product("ab1", repeat=n)] + ["12", "a12b", "x99"]


def language(expr: Expr, rules: dict[str, Expr]) -> Recognizer | None:
    if expr == NOTHING:
        return None
    all_rules = {name: Rule(name, body) for name, body in rules.items()}
    all_rules["root"] = Rule("root", expr)
    return Recognizer(Grammar(GrammarIR(all_rules, "root"), "test"))


def test_each_membership_pattern_is_exact() -> None:
    operands = [regex_to_expr(p, search=True) for p in PATTERNS] + [literal("ab")]
    compiled = [re.compile(p) for p in PATTERNS]
    for wanted in [(True, False, False, False, False), (False, False, False, False, False),
                   (True, True, False, False, False), (False, False, False, True, True)]:
        rules: dict[str, Expr] = {}
        start = regular.combine(operands, lambda bits, w=wanted: bits == w, "r", rules)  # type: ignore[misc]
        checker = language(start, rules)
        for word in WORDS:
            bits = (*tuple(c.search(word) is not None for c in compiled), word == "ab")
            assert (checker is not None and checker.accepts(word)) == (bits == wanted), (wanted, word)


def test_string_under_two_patterns_and_a_length() -> None:
    schema = {"type": "string", "allOf": [{"pattern": "^[a-z]"}, {"pattern": "[0-9]$"}], "maxLength": 4}
    checker = Recognizer(Grammar.from_json_schema(schema, mode="validate"))
    for word in [*WORDS, "ab12", "abc12", "z9", "9z", "a"]:
        expected = re.search("^[a-z]", word) is not None and re.search("[0-9]$", word) is not None and len(word) <= 4
        assert checker.accepts(f'"{word}"') == expected, word


def test_bytes_no_operand_tells_apart_form_one_class() -> None:
    """Every byte is in exactly one class, bytes ascend within a class and classes come in the
    order of their first bytes; two bytes share a class exactly where every operand's automaton
    moves alike on them from every state."""
    rng = random.Random(0)
    pieces = ["[a-f]", "[0-9]", "x", "\\.", "[^a-z]", "é", "[A-Z]+", "(ab|cd)"]
    for _ in range(30):
        patterns = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 4))]
        dfas = [compile_expr(regex_to_expr(p, search=True), {}, BYTE_ALPHABET) for p in patterns]
        classes = regular._byte_classes(dfas)
        assert sorted(byte for cls in classes for byte in cls) == list(range(256))
        assert all(cls == sorted(cls) for cls in classes) and [c[0] for c in classes] == sorted(c[0] for c in classes)
        class_of = {byte: k for k, cls in enumerate(classes) for byte in cls}
        for x, y in itertools.combinations(range(0, 256, 7), 2):
            alike = all((d.trans[:, x] == d.trans[:, y]).all() for d in dfas)
            assert (class_of[x] == class_of[y]) == alike, (patterns, x, y)


def test_many_operands_combine_exactly() -> None:
    """Twenty operands: their target tuples are too many for one int64, so columns are grouped."""
    patterns = [f"^[a-c]{{{n}}}" for n in range(1, 21)]
    operands = [regex_to_expr(p, search=True) for p in patterns]
    rules: dict[str, Expr] = {}
    start = regular.combine(operands, lambda bits: sum(bits) % 3 == 1, "r", rules)
    checker = language(start, rules)
    assert checker is not None
    rng = random.Random(0)
    for word in [*WORDS, *("".join(rng.choice("abcd") for _ in range(rng.randint(0, 24))) for _ in range(300))]:
        expected = sum(re.search(p, word) is not None for p in patterns) % 3 == 1
        assert checker.accepts(word) == expected, word


def test_an_intersection_met_twice_is_made_once_and_holds_at_both_places() -> None:
    """Two properties under the same patterns and length (two schemas that differ in a description)
    share the product's rules, built once per schema, and each still accepts exactly the strings
    both patterns and the length allow."""
    string = {"type": "string", "allOf": [{"pattern": "^[a-z]"}, {"pattern": "[0-9]$"}], "maxLength": 4}
    schema = {"type": "object", "properties": {"a": string, "b": {**string, "description": "b"}},
              "required": ["a", "b"], "additionalProperties": False}
    grammar = Grammar.from_json_schema(schema, mode="validate")
    assert sum(name.endswith("_0") and name.startswith("r") for name in grammar.ir.rules) == 1
    checker = Recognizer(grammar)
    for first, second in itertools.product(["ab12", "z9", "abc12", "9z"], repeat=2):
        expected = all(re.search("^[a-z]", w) and re.search("[0-9]$", w) and len(w) <= 4 for w in (first, second))
        assert checker.accepts(f'{{"a":"{first}","b":"{second}"}}') == expected, (first, second)
