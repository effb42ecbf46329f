"""Statement units from tree-sitter: real and partial code, Python and Go, incremental = fresh at every step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codemask.repetition.units import LANGUAGES, StatementUnits, statement_units, ts_language
from tests.data_paths import corpus_or_skip

ROOT = Path(__file__).resolve().parents[2]
CODEREPETEVAL = "coderepeteval/CodeGenerationBenchmarks.jsonl"  # a full corpus (tests/data_paths.py)
GO_FILES = sorted((ROOT / "tests" / "data" / "code" / "go").glob("*.go"))

PYTHON = '''import math


def area(shape, size):
    """Area of a regular shape."""
    if shape == "square":
        return size * size
    elif shape == "circle":
        return math.pi * size ** 2  # exact enough
    for _ in range(3):
        size += 1
    raise ValueError(shape)
'''


def _coderepeteval(indices: list[int]) -> list[str]:
    rows = corpus_or_skip(CODEREPETEVAL).read_text().splitlines()
    return [(lambda r: r["prompt"] + r["samples"][0])(json.loads(rows[i])) for i in indices]


def test_python_units_in_source_order() -> None:
    labels = [u.label for u in statement_units(PYTHON)]
    assert labels == [
        "import_statement", "function_definition", "expression_statement:string", "if_statement",
        "return_statement", "elif_clause", "return_statement", "comment", "for_statement",
        "expression_statement:augmented_assignment", "raise_statement",
    ]
    starts = [u.start for u in statement_units(PYTHON)]
    assert PYTHON.encode()[starts[4]:].startswith(b"return size * size")


def test_partial_code_keeps_the_statements_before_the_unfinished_line() -> None:
    partial = PYTHON[: PYTHON.index("raise") + 9]  # "raise Val"
    labels = [u.label for u in statement_units(partial)]
    assert labels[:10] == [u.label for u in statement_units(PYTHON)][:10]
    unfinished = "def f(xs):\n    total = 0\n    for x in xs:\n        total += (x *\n"
    labels = [u.label for u in statement_units(unfinished)]
    assert labels[:2] == ["function_definition", "expression_statement:assignment"]


def test_go_units() -> None:
    source = 'package main\n\nimport "fmt"\n\nfunc main() {\n\tx := 1\n\tx++\n\tfmt.Println(x)\n\treturn\n}\n'
    labels = [u.label for u in statement_units(source, "go")]
    assert labels == ["package_clause", "import_declaration", "function_declaration", "short_var_declaration",
                      "inc_statement", "expression_statement:call_expression", "return_statement"]


def test_definitions_carry_their_name_and_block() -> None:
    source = "class A:\n    def f(self):\n        pass\n\ndef f():\n    pass\n\n@overload\ndef g(): ...\n"
    named = [(u.name, source.encode()[u.scope:].split(b"\n")[0]) for u in statement_units(source) if u.name]
    assert named == [("A", b"class A:"), ("f", b"def f(self):"), ("f", b"class A:")]  # f's blocks: A's body, the module
    go = "package main\n\nfunc (s *Stack) Push(x int) {}\n\nfunc init() {}\n\nfunc Push() {}\n"
    assert [u.name for u in statement_units(go, "go") if u.name] == ["*Stack.Push", "Push"]  # init may repeat


@pytest.mark.parametrize("language", sorted(LANGUAGES))
def test_every_unit_kind_exists_in_the_grammar(language: str) -> None:
    grammar = ts_language(language)
    missing = [k for k in LANGUAGES[language].unit_kinds if not grammar.id_for_node_kind(k, True)]
    assert not missing


def _check_incremental(source: str, language: str, chunk: int) -> None:
    data = source.encode()
    units = StatementUnits(language)
    for i in range(0, len(data), chunk):
        units.append(data[i: i + chunk])
        units.refresh()
        assert units.units == statement_units(bytes(units.text), language), (language, i)


@pytest.mark.parametrize("index", [0, 280, 400])
def test_incremental_equals_fresh_parse_on_generated_python(index: int) -> None:
    (source,) = _coderepeteval([index])  # prompts with docstrings, loops, unfinished code at the end
    _check_incremental(source[:2500], "python", 5)


def test_incremental_equals_fresh_parse_on_go() -> None:
    _check_incremental(GO_FILES[0].read_text()[:3000], "go", 7)


def test_truncate_then_append_again() -> None:
    data = PYTHON.encode()
    units = StatementUnits()
    units.append(data)
    units.refresh()
    full = list(units.units)
    cut = data.index(b"    for")
    units.truncate(cut)
    units.refresh()
    assert units.units == statement_units(data[:cut])
    units.append(data[cut:])
    units.refresh()
    assert units.units == full
    assert units.complete and units.code_end == len(data.rstrip())


def test_complete_and_code_end() -> None:
    units = StatementUnits()
    units.append(b"for i in x:\n    ")
    units.refresh()
    assert not units.complete  # a loop with no body yet may not end here
    units.append(b"y = i\n")
    units.refresh()
    assert units.complete and units.code_end == len(b"for i in x:\n    y = i")
    units.append(b"z = (\n    ")
    units.refresh()
    assert not units.complete and units.code_end < len(units.text.rstrip())
    with pytest.raises(ValueError, match="RPG has no statement units"):
        StatementUnits("cobol")


def test_docstrings_of_definitions() -> None:
    units = StatementUnits()
    units.append(b'def f(a):\n    r"""Doc\n    more\n    """\n    return a\n\nclass C:\n    \'x\'\n'
                 b'    def g(self):\n        return 1\n\ndef k():\n    """unterminated')
    units.refresh()
    found = {u.name: units.docstring(u) for u in units.units if u.name is not None}
    assert found == {"f": "Doc\n    more\n    ", "C": "x", "g": None, "k": None}
    assert all(units.docstring(u) is None for u in units.units if u.name is None)
