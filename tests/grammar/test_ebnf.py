"""The EBNF front-end: the IR it builds, every real GBNF/EBNF grammar we have, its errors, and the
languages of the JSON grammars checked against ``json.loads`` through the reference oracle."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

from codemask import Grammar, GrammarError, GrammarSyntaxError
from codemask.grammar.ebnf import parse_ebnf
from codemask.grammar.ir import (
    EMPTY,
    MAX_CODE_POINT,
    CharClass,
    Choice,
    GrammarIR,
    Literal,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    char_class,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import oracle  # the reference recognizer lives in tests/
from data_paths import TEST_DATA as DATA

ROOT = Path(__file__).resolve().parents[2]
SHARED_GRAMMARS = sorted((DATA / "grammars").rglob("*.gbnf")) + sorted((DATA / "grammars").rglob("*.ebnf"))
OUR_GRAMMARS = sorted((ROOT / "grammars").glob("*.ebnf")) + sorted((ROOT / "grammars").glob("*.gbnf"))


def body(text: str, rule: str = "root") -> object:
    return parse_ebnf(text).rules[rule].body


def error(text: str, **kwargs: str) -> GrammarSyntaxError:
    with pytest.raises(GrammarSyntaxError) as info:
        parse_ebnf(text, **kwargs)
    return info.value


# --------------------------------------------------------------------------------------------
# Every real grammar
# --------------------------------------------------------------------------------------------

def test_the_shared_grammars_are_all_here() -> None:
    names = {p.name for p in SHARED_GRAMMARS}
    assert {"json.gbnf", "c.gbnf", "chess.gbnf", "japanese.gbnf", "builtin_json.ebnf", "vllm-sql.gbnf"} <= names


@pytest.mark.parametrize("path", SHARED_GRAMMARS + OUR_GRAMMARS, ids=lambda p: p.name)
def test_every_real_grammar_parses_and_generates_sentences(path: Path) -> None:
    ir = parse_ebnf(path.read_text(encoding="utf-8"), source=str(path))
    assert ir.start == "root" and "root" in ir.rules and not ir.lexer_mode
    defined = re.findall(r"^([A-Za-z0-9_-]+)\s*::=", path.read_text(encoding="utf-8"), re.MULTILINE)
    assert list(ir.rules) == defined
    rng = random.Random(path.name)
    for _ in range(5):
        sentence = oracle.sample(ir, rng, max_depth=6)
        assert oracle.accepts(ir, sentence), sentence
        cut = rng.randint(0, len(sentence))
        assert oracle.is_viable_prefix(ir, sentence[:cut])


def test_llama_cpp_json_gbnf_structure() -> None:
    ir = parse_ebnf((DATA / "grammars/gbnf/llama.cpp/json.gbnf").read_text())
    assert set(ir.rules) == {"root", "value", "object", "array", "string", "number", "ws"}
    # ws ::= | " " | "\n" [ \t]{0,20}: an empty alternative, and {0,20} kept as one counted repeat
    assert ir.rules["ws"].body == Choice((EMPTY, Literal(b" "),
                                          Sequence((Literal(b"\n"), Repeat(CharClass(((9, 9), (32, 32))), 0, 20)))))
    string = ir.rules["string"].body
    assert isinstance(string, Sequence)
    char = string.items[1]
    assert isinstance(char, Repeat) and isinstance(char.item, Choice)
    assert char.item.alternatives[0] == CharClass(((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)), True)


def test_xgrammar_lookaheads_become_rule_lookaheads() -> None:
    ir = parse_ebnf((DATA / "grammars/ebnf/xgrammar/builtin_json.ebnf").read_text())
    with_lookahead = {name for name, rule in ir.rules.items() if rule.lookahead is not None}
    assert with_lookahead == {"value_non_str", "members_and_embrace", "members_suffix", "member_suffix_suffix",
                              "characters_and_colon", "characters_and_comma", "characters_and_embrace",
                              "characters_item"}
    # (= [ \n\t]* member_suffix_suffix)
    assert ir.rules["value_non_str"].lookahead == Sequence(
        (Repeat(CharClass(((9, 10), (32, 32))), 0, None), RuleRef("member_suffix_suffix")))
    # [\"{[0-9tfn-]: an escaped quote, '[' unescaped, a trailing '-'
    look = ir.rules["characters_and_colon"].lookahead
    assert isinstance(look, Sequence)
    assert look.items[1] == CharClass(((0x22, 0x22), (0x2D, 0x2D), (0x30, 0x39), (0x5B, 0x5B), (0x66, 0x66),
                                       (0x6E, 0x6E), (0x74, 0x74), (0x7B, 0x7B)))


# --------------------------------------------------------------------------------------------
# The IR, construct by construct
# --------------------------------------------------------------------------------------------

def test_string_escapes_are_code_points_in_utf8() -> None:
    assert body(r'root ::= "a\n\t\r\\\"b"') == Literal(b'a\n\t\r\\"b')
    assert body(r'root ::= "\x41\xe9\u00e9\U0001F600"') == Literal("Aéé😀".encode())  # \xHH is U+00HH
    assert body(r'root ::= "\x410"') == Literal(b"A0")  # exactly two hex digits, as in llama.cpp
    assert body(r'''root ::= "\'\?\a\b\f\v\0\e\[\]\-"''') == Literal(b"'?\a\b\f\v\x00\x1b[]-")
    assert body('root ::= "日本"') == Literal("日本".encode())
    assert body('root ::= ""') == EMPTY


def test_character_classes() -> None:
    assert body("root ::= [a-z0-9_]") == CharClass(((0x30, 0x39), (0x5F, 0x5F), (0x61, 0x7A)))
    assert body("root ::= [^\\n]") == CharClass(((10, 10),), True)
    assert body("root ::= [-+]") == body("root ::= [+-]") == CharClass(((0x2B, 0x2B), (0x2D, 0x2D)))
    assert body("root ::= [a-]") == CharClass(((0x2D, 0x2D), (0x61, 0x61)))
    assert body(r"root ::= [\]\[\-\^\\]") == CharClass(((0x2D, 0x2D), (0x5B, 0x5E)))
    assert body(r"root ::= [\x00-\x1F\u2028\U0001F600-\U0001F64F]") == CharClass(
        ((0, 0x1F), (0x2028, 0x2028), (0x1F600, 0x1F64F)))
    assert body("root ::= [ぁ-ゟ]") == CharClass(((0x3041, 0x309F),))
    assert body("root ::= [\\.\\*\\+\\?\\(\\)\\{\\}\\|\\/\\$]") == char_class(
        [(ord(c), ord(c)) for c in "$()*+./?{|}"])
    assert body("root ::= .") == CharClass(((0, MAX_CODE_POINT),))


def test_sequences_choices_groups_and_quantifiers() -> None:
    assert body('root ::= "a" "b" x\nx ::= "c"') == Sequence((Literal(b"ab"), RuleRef("x")))
    assert body('root ::= ("a" | "b")* "c"+ "d"?') == Sequence((
        Repeat(Choice((Literal(b"a"), Literal(b"b"))), 0, None), Repeat(Literal(b"c"), 1, None),
        Repeat(Literal(b"d"), 0, 1)))
    a = Literal(b"a")
    assert body('root ::= "a"{3}') == Repeat(a, 3, 3)
    assert body('root ::= "a"{2,}') == Repeat(a, 2, None)
    assert body('root ::= "a"{ 2 , 5 }') == Repeat(a, 2, 5)
    assert body('root ::= "a"{,4}') == Repeat(a, 0, 4)
    assert body('root ::= "a"{1000,100000}') == Repeat(a, 1000, 100000)  # never expanded into copies
    assert body('root ::= ( )') == EMPTY
    assert body('root ::= "a" | | "b"') == Choice((a, EMPTY, Literal(b"b")))


def test_rules_span_lines_and_end_where_the_next_rule_starts() -> None:
    ir = parse_ebnf('# leading comment\nroot ::=\n  "a" # trailing comment\n  | "b"\n    "c"\n\nnext-rule_2 ::= "d"')
    assert ir.rules["root"].body == Choice((Literal(b"a"), Literal(b"bc")))
    assert ir.rules["next-rule_2"].body == Literal(b"d")
    assert parse_ebnf('root ::= x\r\nx ::= "y"\r\n').rules["x"].body == Literal(b"y")


def test_lookahead_assertions() -> None:
    ir = parse_ebnf('root ::= a "b"\na ::= "a"+ (= "b" | "c")\n')
    assert ir.rules["a"].lookahead == Choice((Literal(b"b"), Literal(b"c")))
    assert ir.rules["root"].lookahead is None


def test_start_rule_may_be_chosen() -> None:
    ir = parse_ebnf('a ::= "x"\nb ::= a a\n', start="b")
    assert ir.start == "b"
    assert Grammar.from_ebnf('a ::= "x"\n', start="a").ir.start == "a"


# --------------------------------------------------------------------------------------------
# Errors: the message, and the line and column of the offending character
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "line", "column", "message"), [
    ('root ::= "abc\n', 1, 10, "unterminated string"),
    ('root ::= "a"\nx ::= "abc', 2, 7, "unterminated string"),
    ('root ::= [a-z', 1, 10, "unterminated character class"),
    ('root ::= "a"\n  [^\\n\nx ::= "b"', 2, 3, "unterminated character class"),
    ('root ::= "a" ("b" | "c"\n', 1, 14, "unclosed '('"),
    ('root ::= "a")\n', 1, 13, "unmatched ')'"),
    ('root "a"\n', 1, 6, "expected '::='"),
    ('root ::= "a"\nbad rule ::= "b"\n', 2, 5, "the definition of rule 'rule' must start on a new line"),
    ('root ::= "\\q"', 1, 11, "unknown escape '\\q'"),
    ('root ::= "\\x4"', 1, 11, "exactly 2 hex digits"),
    ('root ::= "\\u12G4"', 1, 11, "exactly 4 hex digits"),
    ('root ::= "\\U00110000"', 1, 11, "beyond the last code point"),
    ('root ::= "\\uD800"', 1, 11, "surrogate"),
    ('root ::= [\\d]', 1, 11, "not supported in EBNF character classes"),
    ('root ::= [z-a]', 1, 11, "character range out of order"),
    ('root ::= "a"{3,2}', 1, 13, "repetition bounds out of order"),
    ('root ::= "a"{}', 1, 13, "expected a repetition count"),
    ('root ::= "a"{,}', 1, 13, "no repetition bounds"),
    ('root ::= "a"{2;3}', 1, 15, "expected ',' or '}'"),
    ('root ::= "a"{2,3', 1, 17, "expected '}'"),
    ('root ::= * "a"', 1, 10, "nothing to repeat"),
    ('root ::= "a" | + "a"', 1, 16, "nothing to repeat"),
    ('root ::=\n\nx ::= "a"', 1, 9, "empty body"),
    ('root ::=', 1, 9, "empty body"),
    ('root ::= "a" x ::= "b"', 1, 14, "must start on a new line"),
    ('root ::= <[1234]>', 1, 10, "token references"),
    ('root ::= !<think>', 1, 10, "token references"),
    ('root ::= "a" @', 1, 14, "unexpected '@'"),
    ('root ::= ("a" (= "b"))', 1, 15, "may only end a rule"),
    ('root ::= "a" (= "b"', 1, 14, "unclosed lookahead"),
    ('root ::= "a" (= )', 1, 14, "empty lookahead"),
    ('root ::= "a" (= "b") "c"', 1, 22, "unexpected '\"'"),
    ('root ::= "a"\nroot ::= "b"', 2, 1, "defined twice (first on line 1)"),
    ('root ::= "a" item\nitem ::= "b" missing\n', 2, 14, "undefined rule 'missing' (referenced in rule 'item')"),
])
def test_syntax_errors_point_at_the_offending_character(text: str, line: int, column: int, message: str) -> None:
    err = error(text, source="g.gbnf")
    assert (err.line, err.column) == (line, column), str(err)
    assert message in err.reason
    assert str(err).startswith(f"g.gbnf:{line}:{column}: ")
    assert err.snippet == text.split("\n")[line - 1].rstrip("\r")


def test_a_missing_start_rule_is_named() -> None:
    with pytest.raises(GrammarError, match=r"start rule 'root' is not defined \(rules: a, b\)"):
        parse_ebnf('a ::= "x"\nb ::= "y"\n')
    with pytest.raises(GrammarError, match="start rule 'main'"):
        parse_ebnf('root ::= "x"\n', start="main")
    with pytest.raises(GrammarError, match="rules: none"):
        parse_ebnf("# nothing but a comment\n")


def test_errors_in_a_real_grammar_file_name_the_file_and_line() -> None:
    text = (DATA / "grammars/gbnf/llama.cpp/c.gbnf").read_text()
    broken = text.replace('"//" [^\\n]*', '"//" [^\\n*', 1)
    line = broken[:broken.index('"//" [^')].count("\n") + 1
    err = error(broken, source="c.gbnf")
    assert (err.line, err.reason) == (line, "unterminated character class") and "c.gbnf" in str(err)
    err = error(text.replace("parameter? ", "paramter? "), source="c.gbnf")
    assert "undefined rule 'paramter'" in err.reason and err.line == 3


# --------------------------------------------------------------------------------------------
# Languages, against json.loads
# --------------------------------------------------------------------------------------------

def _json_documents(limit: int) -> list[object]:
    """Small real JSON documents: the test instances of every other schema of the jsonschemabench sample."""
    docs: list[object] = []
    for path in sorted((DATA / "jsonschemabench").glob("*.json"))[::2]:
        for test in json.loads(path.read_text(encoding="utf-8"))["tests"]:
            if len(json.dumps(test["data"])) <= 400:
                docs.append(test["data"])
    return docs[:limit]


def _strict_loads(text: str) -> bool:
    def refuse(name: str) -> None:
        raise ValueError(name)
    try:
        json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return True


def _mutants(text: str, rng: random.Random, count: int) -> list[str]:
    alphabet = '{}[]",:.-+eE0123456789 \n\tabcfnrstu\\/\x01é'
    out = []
    for _ in range(count):
        i = rng.randrange(len(text) + 1)
        kind = rng.randrange(3)
        if kind == 0:
            out.append(text[:i] + rng.choice(alphabet) + text[i:])
        elif kind == 1:
            out.append(text[:i] + text[i + 1:])
        else:
            out.append(text[:i] + rng.choice(alphabet) + text[i + 1:])
    return out


GBNF_NUMBER = re.compile(r"-?(?:[0-9]|[1-9][0-9]{0,15})(?:\.[0-9]+)?(?:[eE][-+]?[0-9][1-9]{0,15})?")


def _within_llama_json_limits(doc: object, depth: int = 0) -> bool:
    """What llama.cpp's json.gbnf can express: an object at the top, at most 16 integer digits,
    exponents of the shape it allows, indentation (2 per level) of at most 20 columns."""
    if depth == 0 and not isinstance(doc, dict):
        return False
    if isinstance(doc, bool) or doc is None or isinstance(doc, str):
        return True
    if isinstance(doc, (int, float)):
        return GBNF_NUMBER.fullmatch(json.dumps(doc)) is not None
    children = list(doc.values()) if isinstance(doc, dict) else list(doc) if isinstance(doc, list) else []
    if children and 2 * (depth + 1) > 20:
        return False
    return all(_within_llama_json_limits(child, depth + 1) for child in children)


def test_llama_cpp_json_gbnf_agrees_with_json_loads() -> None:
    ir = parse_ebnf((DATA / "grammars/gbnf/llama.cpp/json.gbnf").read_text())
    rng = random.Random(7)
    checked = 0
    for doc in _json_documents(120):
        for text in (json.dumps(doc, separators=(",", ":")), json.dumps(doc, indent=2)):
            assert oracle.accepts(ir, text.encode()) == _within_llama_json_limits(doc), text
            checked += 1
            for mutant in _mutants(text, rng, 2):
                if oracle.accepts(ir, mutant.encode()):  # it never accepts what is not JSON
                    assert _strict_loads(mutant), mutant
    assert checked >= 200
    # what the grammar restricts, on purpose: an object at the top, no "\/", exponents like 1e10
    for text in ['[1]', '{"a":"\\/"}', '{"a":1e10}', '{"a":"\x7f"}']:
        assert _strict_loads(text) and not oracle.accepts(ir, text.encode())


def test_xgrammar_builtin_json_agrees_with_json_loads() -> None:
    """XGrammar's JSON grammar, for objects and arrays at the top: with its lookaheads ignored it is
    exactly JSON; enforced as written, one of them (``characters_and_embrace``: ``(=[ \\n\\t]* [},])``)
    also refuses a string that ends an object inside an array (``[{"a": "b"}]``). XGrammar's own
    ``accept_string`` takes those bytes, so its matcher does not enforce that lookahead either."""
    enforced = parse_ebnf((DATA / "grammars/ebnf/xgrammar/builtin_json.ebnf").read_text())
    ignored = GrammarIR({name: Rule(name, rule.body) for name, rule in enforced.rules.items()}, "root")
    string_closes_object_in_array = re.compile(r'"\s*}\s*]')
    rng = random.Random(11)
    documents = [doc for doc in _json_documents(80) if isinstance(doc, (dict, list))]
    assert len(documents) >= 40
    for doc in documents:
        for text in (json.dumps(doc), json.dumps(doc, indent=2, ensure_ascii=False)):
            assert oracle.accepts(ignored, text.encode()), text
            accepted = oracle.accepts(enforced, text.encode())
            assert accepted == (not string_closes_object_in_array.search(text)), text
            for cut in rng.sample(range(len(text)), min(3, len(text))):
                assert oracle.is_viable_prefix(enforced if accepted else ignored, text[:cut].encode())
            for mutant in _mutants(text, rng, 2):
                bare = mutant[:1] in "[{" and mutant[-1:] in "]}"  # the root takes no whitespace around it
                expected = _strict_loads(mutant) and bare and "\r" not in mutant
                assert oracle.accepts(ignored, mutant.encode()) == expected, mutant
    for _ in range(30):
        assert _strict_loads(oracle.sample(enforced, rng, max_depth=5).decode())


def test_chess_and_arithmetic_accept_what_they_should() -> None:
    chess = parse_ebnf((DATA / "grammars/gbnf/llama.cpp/chess.gbnf").read_text())
    assert oracle.accepts(chess, b"1. e4 e5\n2. Nf3 Nc6\n")
    assert oracle.accepts(chess, b"1. e4 e5\n12. O-O-O Qxd8+\n")
    assert not oracle.accepts(chess, b"1. e4 e5\n")  # at least one more numbered move
    assert not oracle.accepts(chess, b"1. e9 e5\n2. a1 a2\n")
    arithmetic = parse_ebnf((DATA / "grammars/gbnf/llama.cpp/arithmetic.gbnf").read_text())
    assert oracle.accepts(arithmetic, b"(a +12) *b= 3\n")
    assert not oracle.accepts(arithmetic, b"(a +12 *b= 3\n")
    japanese = parse_ebnf((DATA / "grammars/gbnf/llama.cpp/japanese.gbnf").read_text())
    assert oracle.accepts(japanese, "こんにちは、世界".encode())
    assert not oracle.accepts(japanese, b"hello")
    assert oracle.is_viable_prefix(japanese, "こ".encode()[:2])  # inside a character


def test_dot_is_any_code_point_including_newline() -> None:
    ir: GrammarIR = parse_ebnf('root ::= "<" . ">"')
    for char in ["a", "\n", "é", "😀", "\x00"]:
        assert oracle.accepts(ir, f"<{char}>".encode())
    assert not oracle.accepts(ir, b"<>") and not oracle.accepts(ir, b"<\xff>")
