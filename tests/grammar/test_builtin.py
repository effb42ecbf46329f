"""Builtin grammars: loading by name, and the JSON grammar checked
against ``json.loads`` (strict: no NaN/Infinity) on real documents and their mutants."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from codemask import Grammar, GrammarError
from codemask.grammar.builtin import available, grammar_dirs, load_builtin

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import oracle  # the reference recognizer lives in tests/
from data_paths import TEST_DATA

ROOT = Path(__file__).resolve().parents[2]


def json_ir():  # type: ignore[no-untyped-def]
    return Grammar.builtin("json").ir


def strict_loads(text: str) -> bool:
    def refuse(name: str) -> None:
        raise ValueError(name)
    try:
        json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return True


def real_documents(every: int, max_len: int = 500) -> list[object]:
    """The test instances of every ``every``-th schema of the jsonschemabench sample, valid or not for
    their schema (all are JSON), small enough for the oracle."""
    docs: list[object] = []
    for path in sorted((TEST_DATA / "jsonschemabench").glob("*.json"))[::every]:
        for test in json.loads(path.read_text(encoding="utf-8"))["tests"]:
            if len(json.dumps(test["data"])) <= max_len:
                docs.append(test["data"])
    return docs


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------

def test_json_is_builtin_and_cached() -> None:
    grammar = Grammar.builtin("json")
    assert grammar.kind == "ebnf" and grammar.ir.start == "root"
    assert load_builtin("json") is grammar  # parsed once
    assert "json" in available()
    assert grammar_dirs()[0].name == "grammars"


def test_every_shipped_grammar_loads() -> None:
    names = available()
    assert names
    for name in names:
        assert load_builtin(name).ir.rules


@pytest.mark.parametrize("name", ["jsn", "../grammars/json", "json.ebnf", "", "JSON/"])
def test_unknown_names_list_the_available_ones(name: str) -> None:
    with pytest.raises(GrammarError, match=r"unknown builtin grammar .* \(available: .*json"):
        load_builtin(name)


# --------------------------------------------------------------------------------------------
# The JSON grammar is JSON
# --------------------------------------------------------------------------------------------

EDGE_CASES = [
    "0", "-0", "1E+2", "1e-2", "0.5e-3", "-12.50", "123456789012345678901234567890", "true", "false", "null",
    '""', '"\\u00e9\\ud800\\/\\b\\f\\n\\r\\t\\"\\\\"', '"é😀\x7f"', " \t\r\n{ } \r\n", "[ ]", '{"a":{"b":[[]]}}',
    "01", "1.", ".5", "+1", "1e", "-", "--1", "0x10", "1.5e+", "NaN", "Infinity", "-Infinity", "tru", "nul",
    '"\x01"', '"\\x41"', '"\\u12"', '"\\U0001F600"', "'a'", "[1,]", "{,}", '{"a"}', '{"a":1,}', "[1 2]", '{1:2}',
    "[", "]", "", " ", "{}}", "[]]", '"abc', "\u00a0[]", "[]\x0b", '{"a":1}{"b":2}',
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_json_edge_cases(text: str) -> None:
    assert oracle.accepts(json_ir(), text.encode()) == strict_loads(text)


def test_json_agrees_with_json_loads_on_real_documents_and_mutants() -> None:
    ir = json_ir()
    rng = random.Random(3)
    alphabet = '{}[]",:.-+eE0123456789 \n\t\rabcfnrstuxl\\/\x00\x1fé😀'
    documents = real_documents(every=1, max_len=300)[::2]
    assert len(documents) > 100
    for i, doc in enumerate(documents):
        indented = json.dumps(doc, indent=2 if i % 2 else "\t", ensure_ascii=bool(i % 3))
        for text in (json.dumps(doc), indented):
            assert oracle.accepts(ir, text.encode()), text
            for _ in range(3):
                i = rng.randrange(len(text) + 1)
                mutant = rng.choice([text[:i] + rng.choice(alphabet) + text[i:], text[:i] + text[i + 1:],
                                     text[:i] + rng.choice(alphabet) + text[i + 1:], text[:i]])
                assert oracle.accepts(ir, mutant.encode()) == strict_loads(mutant), mutant


def test_every_single_deletion_of_a_document() -> None:
    ir = json_ir()
    text = '{"id": -1.5e+3, "tags": ["a", "\\u00e9"], "ok": [true, false, null], "n": {}}'
    for i in range(len(text)):
        mutant = text[:i] + text[i + 1:]
        assert oracle.accepts(ir, mutant.encode()) == strict_loads(mutant), mutant


def test_json_prefixes() -> None:
    ir = json_ir()
    rng = random.Random(5)
    for doc in real_documents(every=3):
        data = json.dumps(doc, ensure_ascii=False).encode()
        for cut in sorted(rng.sample(range(len(data) + 1), min(5, len(data) + 1))):
            assert oracle.is_viable_prefix(ir, data[:cut])  # cuts may fall inside a UTF-8 character
    for dead in [b"{,", b"[1,]", b'{"a" 1', b"01", b"tx", b"[\xc3\x28", b'"\x01', b"{}{", b"-a", b"1.e"]:
        assert not oracle.is_viable_prefix(ir, dead), dead
    for alive in [b"", b"  ", b"[", b'{"a', b'"\\u00', b"-", b"1.", b"1e+", b'"\xf0\x9f', b"[1, 2"]:
        assert oracle.is_viable_prefix(ir, alive), alive


def test_json_samples_are_json() -> None:
    ir = json_ir()
    rng = random.Random(9)
    for _ in range(100):
        text = oracle.sample(ir, rng, max_depth=6).decode("utf-8")
        assert strict_loads(text), text


# --------------------------------------------------------------------------------------------
# python_function: every sentence is Python (ast.parse is the oracle)
# --------------------------------------------------------------------------------------------


def test_python_function_samples_are_python() -> None:
    import ast

    ir = Grammar.builtin("python_function").ir
    rng = random.Random(5)
    for _ in range(400):
        source = oracle.sample(ir, rng, max_depth=8).decode("utf-8")
        ast.parse(source)  # raises on any sentence that is not Python


@pytest.mark.parametrize("source, expected", [
    ("def area(width, height):\n    return width * height\n", True),
    ('def f(a, b=1):\n    """Doc."""\n    total = a + b\n    if total > 3:\n        return 0\n    return total\n',
     True),
    ("def iff(x):\n    return x.append(None)\n", True),
    ("def if(x):\n    return x\n", False),  # keywords are not names
    ("def f(return):\n    return 1\n", False),
    ("def f(x):\n    y = lambda\n    return x\n", False),
    ("def f(a=1, b):\n    return a\n", False),  # a default before a plain parameter
    ("def f(x):\n    return x == not x\n", False),
    ("def f(x):\n    return x", False),  # the return line ends the function
])
def test_python_function_names_and_shapes(source: str, expected: bool) -> None:
    assert oracle.accepts(Grammar.builtin("python_function").ir, source.encode()) is expected
