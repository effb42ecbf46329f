"""Grammar texts and schemas that used to crash the front-ends give a clear error instead:
nesting deeper than the limit (``RecursionError`` before), repetition counts and numbers too
large (``OverflowError``), files that are not UTF-8 (``UnicodeDecodeError``), and a language
that is empty (reported as a ``prefix=`` problem although no prefix was given). Just inside
each limit, the grammar compiles."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest

from codemask import Grammar, GrammarCompiler, GrammarMatcher
from codemask.errors import GrammarError, GrammarSyntaxError, InvalidSchemaError
from codemask.grammar.ir import MAX_NESTING
from codemask.grammar.json_schema.nodes import MAX_SCHEMA_DEPTH
from tests.engine.conftest import vocabulary


def compile_grammar(grammar: Grammar) -> GrammarMatcher:
    return GrammarMatcher(GrammarCompiler(vocabulary("gpt2"), cache_dir=False, progress=False).compile(grammar))


def nested_ebnf(depth: int) -> str:
    """``depth`` groups, alternating sequences and choices (which nothing flattens away)."""
    expr = '"z"'
    for level in range(depth):
        expr = f'("a" {expr} | "b")' if level % 2 else f'("c" | {expr} "d")'
    return expr


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 250, 2000])
def test_ebnf_nesting_deeper_than_the_limit_names_line_and_column(depth: int) -> None:
    text = "root ::= \"x\"\n  | " + "(" * depth + '"a"' + ")" * depth
    with pytest.raises(GrammarSyntaxError, match=rf"<ebnf>:2:{5 + MAX_NESTING}: nesting deeper than {MAX_NESTING}"):
        Grammar.from_ebnf(text)


def test_ebnf_nesting_at_the_limit_compiles() -> None:
    matcher = compile_grammar(Grammar.from_ebnf("root ::= " + nested_ebnf(MAX_NESTING)))
    assert matcher.accept_bytes(b"b") and matcher.can_terminate()


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 2000])
def test_lark_and_regex_nesting_deeper_than_the_limit(depth: int) -> None:
    with pytest.raises(GrammarSyntaxError, match=rf"<lark>:1:{8 + MAX_NESTING}: nesting deeper than {MAX_NESTING}"):
        Grammar.from_lark("start: " + "(" * depth + '"a"' + ")" * depth)
    with pytest.raises(GrammarSyntaxError, match=rf"<regex>:1:{1 + MAX_NESTING}: nesting deeper than {MAX_NESTING}"):
        Grammar.from_regex("(" * depth + "a" + ")" * depth)


def test_lark_and_regex_nesting_at_the_limit_compiles_and_brackets_in_literals_do_not_count() -> None:
    lark = Grammar.from_lark('start: "((((" ' + "(" * MAX_NESTING + '"a"' + ")" * MAX_NESTING + " /[(]+/ // ((((")
    assert compile_grammar(lark).accept_bytes(b"((((a(((")
    regex = Grammar.from_regex(r"[(]\(" * 100 + "(" * MAX_NESTING + "a" + ")" * MAX_NESTING)
    assert compile_grammar(regex).accept_bytes(b"((" * 100 + b"a")


def nested_properties(depth: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def nested_items(depth: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "minItems": 1}
    return schema


@pytest.mark.parametrize("schema", [nested_properties(500), nested_items(3000)], ids=["properties", "items"])
def test_deeply_nested_schemas_are_refused_with_their_pointer(schema: dict[str, object]) -> None:
    with pytest.raises(InvalidSchemaError, match=rf"invalid JSON Schema at /(properties/a|items)/.*: nesting deeper "
                                                 rf"than {MAX_SCHEMA_DEPTH} levels"):
        Grammar.from_json_schema(schema)


def test_schema_text_nested_too_deep_to_read_is_refused() -> None:
    depth = 100_000
    text = '{"type": "array", "items": ' * depth + "{}" + "}" * depth
    with pytest.raises(InvalidSchemaError, match="nest"):
        Grammar.from_json_schema(text)


def test_schemas_nested_just_inside_the_limit_compile() -> None:
    deep = compile_grammar(Grammar.from_json_schema(nested_items(MAX_SCHEMA_DEPTH - 1)))
    text = b"[" * (MAX_SCHEMA_DEPTH - 1) + b"7" + b"]" * (MAX_SCHEMA_DEPTH - 1)
    assert deep.accept_bytes(text) and deep.can_terminate()
    wide = compile_grammar(Grammar.from_json_schema(nested_properties(MAX_SCHEMA_DEPTH // 2 - 1)))
    assert wide.accept_bytes(b'{"a": ' * (MAX_SCHEMA_DEPTH // 2 - 1))


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_numbers_json_cannot_hold_are_refused(value: float) -> None:
    for schema in ({"type": "number", "maximum": value}, {"enum": [1, value]}, {"const": value}):
        with pytest.raises(InvalidSchemaError, match=r"invalid JSON Schema at /(maximum|enum/1|const): .* is not a "
                                                     r"JSON number"):
            Grammar.from_json_schema(schema)


def test_subclasses_of_json_types_are_json_values() -> None:
    """The check's quick pass takes exact types only; a subclass (an ordered dict here) is left to
    the full check, which takes it as JSON."""
    plain = {"type": "object", "properties": {"a": {"enum": [True, 1, "x"]}}}
    ordered = OrderedDict(type="object", properties=OrderedDict(a={"enum": [True, 1, "x"]}))
    assert Grammar.from_json_schema(ordered).cache_key == Grammar.from_json_schema(plain).cache_key
    matcher = compile_grammar(Grammar.from_json_schema(ordered))
    assert matcher.accept_bytes(b'{"a": "x"}') and matcher.can_terminate()


def test_a_huge_but_finite_bound_still_compiles() -> None:
    matcher = compile_grammar(Grammar.from_json_schema({"type": "integer", "maximum": 10**400}))
    assert matcher.accept_bytes(b"12345") and matcher.can_terminate()


@pytest.mark.parametrize("text", ['root ::= "a"{99999999999999999999}', 'root ::= "a"{0,99999999999999999999}',
                                  'root ::= "a"{3,' + "9" * 5000 + "}"])
def test_repetition_counts_beyond_machine_integers_are_refused(text: str) -> None:
    with pytest.raises(GrammarSyntaxError, match=r"<ebnf>:1:1[46]: repetition count 9+ is too large"):
        Grammar.from_ebnf(text)


def test_the_largest_repetition_count_compiles() -> None:
    matcher = compile_grammar(Grammar.from_ebnf('root ::= "a"{0,9223372036854775807}'))
    assert matcher.accept_bytes(b"aaaa") and matcher.can_terminate()


def test_a_grammar_file_that_is_not_utf8_is_a_grammar_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.gbnf"
    path.write_bytes(b'root ::= "caf\xe9"\n')
    with pytest.raises(GrammarError, match=r"latin1\.gbnf: not UTF-8 text \(byte 0xe9 on line 1, offset 13\)"):
        Grammar.from_file(path)


@pytest.mark.parametrize("text", [r"root ::= [^\x00-\U0010FFFF]", r'root ::= "a" [^\x00-\U0010FFFF]',
                                  r"root ::= [\uD800-\uDFFF]"])
def test_an_empty_language_is_reported_as_such(text: str) -> None:
    with pytest.raises(GrammarError, match="the start rule 'root' matches no finite string"):
        compile_grammar(Grammar.from_ebnf(text))
