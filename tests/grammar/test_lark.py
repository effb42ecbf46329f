"""The Lark front-end: structure of the IR it builds, its errors, and every shared Lark grammar."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from codemask import Grammar, GrammarError, GrammarSyntaxError
from codemask.grammar.ir import NOTHING, Choice, Literal, RuleRef, Sequence, TerminalRef
from codemask.grammar.lark import DECLARED_PREFIX, is_declared, lark_name, parse_lark

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import lark_harness as H  # the shared harness lives in tests/


def alternatives(ir, rule: str) -> list[tuple]:
    """A rule's body as a list of tuples of item names (``%T`` for terminals)."""
    body = ir.rules[rule].body
    assert isinstance(body, Choice)
    out = []
    for alt in body.alternatives:
        assert isinstance(alt, Sequence)
        out.append(tuple(f"%{i.name}" if isinstance(i, TerminalRef) else i.name for i in alt.items))
    return out


# --------------------------------------------------------------------------------------------
# Structure
# --------------------------------------------------------------------------------------------

def test_rules_become_choices_of_sequences_of_references() -> None:
    ir = parse_lark('start: "a" item | \nitem: "b" "c"\n')
    assert ir.start == "start" and next(iter(ir.rules)) == "start"
    assert alternatives(ir, "start") == [("%A", "item"), ()]
    assert alternatives(ir, "item") == [("%B", "%C")]
    assert all(isinstance(i, (RuleRef, TerminalRef)) for r in ir.rules.values()
               for alt in r.body.alternatives for i in alt.items)
    assert ir.terminals["A"].body == Literal(b"a") and ir.terminals["A"].literal == b"a"
    assert ir.lexer_mode and ir.ignore == ()


def test_ebnf_operators_expand_to_helper_rules() -> None:
    ir = parse_lark('start: "x"+ ["y"] "z"*\n')
    helpers = [name for name in ir.rules if name != "start"]
    assert helpers and all(name.startswith("__start_") for name in helpers)
    # [y] and z* both allow nothing: the start rule has alternatives with and without them
    assert ("%X", "%Y") in [alt[:2] for alt in alternatives(ir, "start")] or any(
        "%Y" in alt for alt in alternatives(ir, "start"))


def test_terminals_are_in_lark_lexer_order() -> None:
    ir = parse_lark('start: NAME | KW | EQ | EQEQ | HI\nNAME: /[a-z]+/\nKW: "if"\nEQ: "="\nEQEQ: "=="\nHI.2: "!"\n')
    # priority first, then unbounded width before fixed, then longer before shorter, then name
    assert list(ir.terminals) == ["HI", "NAME", "EQEQ", "KW", "EQ"]
    assert ir.terminals["HI"].priority == 2 and ir.terminals["NAME"].priority == 0
    assert ir.terminals["NAME"].literal is None and ir.terminals["KW"].literal == b"if"


def test_order_field_follows_lark_and_keywords_are_listed_in_unless() -> None:
    text = 'start: NAME | "if" | "x1" | "select"i | HI | CI | AB\nNAME: /[a-z][a-z0-9]*/\nHI.2: "hi"\nCI: /[a-z]+/i\n'
    text += 'AB: "ab"\nW: /a|ab/\n%ignore W\n'
    ir = parse_lark(text)
    assert [t.order for t in ir.terminals.values()] == list(range(len(ir.terminals)))
    # same priority and matched exactly by the regex, in lexer order; "select"i is not embedded in
    # NAME (flag i is not NAME's) but is in CI; HI has another priority
    assert ir.terminals["NAME"].unless == (("SELECT", False), ("AB", True), ("IF", True), ("X1", True))
    assert ir.terminals["CI"].unless == (("SELECT", True), ("AB", True), ("IF", True))
    # Lark tests with re.match: /a|ab/ stops at "a", so "ab" is not one of W's keywords
    assert ir.terminals["W"].unless == ()
    assert ir.terminals["IF"].unless == () and ir.terminals["HI"].unless == ()


def test_anonymous_strings_are_terminals_and_reuse_user_terminals() -> None:
    ir = parse_lark('start: "(" "while" IF "if" "->"\nIF: "if"\n')
    assert alternatives(ir, "start") == [("%LPAR", "%WHILE", "%IF", "%IF", "%__ANON_0")]
    assert ir.terminals["__ANON_0"].literal == b"->"


def test_case_insensitive_string_keeps_its_text_and_gets_a_regex_body() -> None:
    ir = parse_lark('start: "select"i\n')
    (term,) = ir.terminals.values()
    assert term.literal == b"select" and term.body != Literal(b"select")


def test_ignore_named_and_anonymous() -> None:
    ir = parse_lark('start: "a"+\n%import common.WS\n%ignore WS\n%ignore "#"\n')
    assert ir.ignore == ("WS", "__IGNORE_1")
    assert set(ir.ignore) <= set(ir.terminals)
    assert ir.terminals["__IGNORE_1"].literal == b"#"


def test_inlined_rules_aliases_and_templates_stay_rules() -> None:
    text = """
start: _list{item, ","} -> everything
?item: atom | atom "!"
atom: "x" | "y"
_list{x, sep}: x (sep x)*
"""
    ir = parse_lark(text)
    assert alternatives(ir, "start") == [("_list{item,__ANON_0}",)] or alternatives(ir, "start") == [
        ("_list{item,COMMA}",)]
    template = next(name for name in ir.rules if name.startswith("_list{"))
    assert "item" in {i for alt in alternatives(ir, template) for i in alt}
    assert alternatives(ir, "item") == [("atom",), ("atom", "%BANG")]


def test_declared_terminals_have_no_pattern_and_a_marked_name() -> None:
    ir = parse_lark('start: "a" _INDENT "b" _DEDENT\n%declare _INDENT _DEDENT\n')
    marked = DECLARED_PREFIX + "_INDENT"
    assert alternatives(ir, "start") == [("%A", "%" + marked, "%B", "%" + DECLARED_PREFIX + "_DEDENT")]
    assert ir.terminals[marked].body == NOTHING and is_declared(ir.terminals[marked])
    assert not is_declared(ir.terminals["A"]) and lark_name(marked) == "_INDENT"


def test_override_and_extend() -> None:
    ir = parse_lark('start: "a"\n%override start: "b"\n%extend start: "c"\n')
    assert sorted(alternatives(ir, "start")) == [("%B",), ("%C",)]


def test_other_start_rule_and_unused_rules_dropped() -> None:
    ir = parse_lark('start: "a"\nother: "b" helper\nhelper: "c"\n', start="other")
    assert set(ir.rules) == {"other", "helper"} and ir.start == "other"
    assert set(ir.terminals) == {"B", "C"}


def test_relative_import_and_import_paths(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "words.lark").write_text('greeting: "hello" WORLD\nWORLD: "world"\n')
    main = tmp_path / "main.lark"
    main.write_text('start: greeting "!"\n%import .lib.words.greeting\n')
    ir = parse_lark(main.read_text(), source=str(main))
    assert "greeting" in ir.rules
    ir2 = parse_lark('start: greeting\n%import words.greeting\n', import_paths=[str(tmp_path / "lib")])
    assert "greeting" in ir2.rules


def test_grammar_from_lark_and_from_file(tmp_path: Path) -> None:
    grammar = Grammar.from_lark('start: "a" "b"\n')
    assert grammar.kind == "lark" and grammar.ir.lexer_mode
    path = tmp_path / "g.lark"
    path.write_text('start: "a"\n')
    assert Grammar.from_file(path).ir.terminals["A"].literal == b"a"


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "line", "column", "reason"),
    [
        ('start: "a"\nfoo: (\n', 2, 7, "Expecting a value"),
        ('start: "a" ::\n', 1, 12, "Unexpected colon"),
        ('start: "a"\nB: /x/ @\n', 2, 8, "unexpected character '@'"),
        ('Start: "a"\n', 1, 2, "missing colon"),
        ('start: "a"\n"b"\n', 2, 1, "Expecting option"),
    ],
)
def test_syntax_errors_point_at_line_and_column(text: str, line: int, column: int, reason: str) -> None:
    with pytest.raises(GrammarSyntaxError) as info:
        parse_lark(text, source="g.lark")
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert reason in err.reason and str(err).startswith(f"g.lark:{line}:{column}:")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("start: missing\n", "'missing' used but not defined"),
        ("start: MISSING\n", "'MISSING' used but not defined"),
        ('start: A\nA: "a" B\n', "Terminal used but not defined: B"),
        ('start: "a"\n%import nowhere.X\n', "cannot find imported grammar 'nowhere.lark'"),
        ('start: ""\n', "Empty terminals are not allowed"),
        ('start: A\nA: /a*/\n', "terminal A can match the empty string"),
        ('start: A\nA: /a(/\n', "terminal A: invalid regular expression"),
        ('start: "a"\n%ignore B\n', "B"),
    ],
)
def test_semantic_errors_name_the_culprit(text: str, message: str) -> None:
    with pytest.raises(GrammarError) as info:
        parse_lark(text, source="g.lark")
    assert not isinstance(info.value, GrammarSyntaxError)
    assert message in str(info.value) and str(info.value).startswith("g.lark:")


def test_missing_start_rule_lists_the_rules() -> None:
    with pytest.raises(GrammarError, match=r"start rule 'start' is not defined \(rules: expr, term\)"):
        parse_lark('expr: term\nterm: "x"\n')


def test_terminals_the_regex_front_end_refuses_are_all_named() -> None:
    with pytest.raises(GrammarError) as info:
        parse_lark('start: OP WORD NAME\nOP: /[?](?![a-z])/\nWORD: /(?<=x)y/\nNAME: /[a-z]+/\n', source="g.lark")
    message = str(info.value)
    assert message.startswith("g.lark: 2 terminal(s) cannot be used")
    assert "lookahead (?!...) cannot be matched by a grammar (column 4)" in message
    assert "terminal OP /[?](?![a-z])/" in message and "terminal WORD /(?<=x)y/" in message
    assert "NAME" not in message


@pytest.mark.parametrize("regex", [r"ab$", r"^ab", r"\bab", r"a(?:b|\Z)"])
def test_anchored_terminals_are_refused(regex: str) -> None:
    with pytest.raises(GrammarError, match=r"terminal A .*anchor .* depends on the text around the token"):
        parse_lark(f"start: A\nA: /{regex}/\n")


# --------------------------------------------------------------------------------------------
# The shared Lark grammars
# --------------------------------------------------------------------------------------------

# Which terminals each shared grammar cannot have (lookaround, backreference), and other refusals.
EXPECTED_FAILURES = {
    "lark-parser/common.lark": "start rule 'start' is not defined",
    "lark-parser/unicode.lark": "start rule 'start' is not defined",
    "outlines/common.lark": "start rule 'start' is not defined",
    "llguidance/rfc.lark": "Empty terminals are not allowed",
    # lookarounds (names listed in docs/lark-semantics.md §4.5)
    "lark-parser/grammars_verilog.lark": "terminal MULTILINE_COMMENT",
    "lark-parser/lark.lark": "3 terminal(s)",
    "lark-parser/python.lark": "3 terminal(s)",
    "lark-parser/advanced_python2.lark": "2 terminal(s)",
    "syncode/python.lark": "4 terminal(s)",
}


def shared_grammar_files() -> list[str]:
    return sorted(str(p.relative_to(H.SHARED_LARK)) for p in H.SHARED_LARK.glob("*/*.lark"))


@pytest.mark.parametrize("relpath", shared_grammar_files())
def test_shared_grammar_loads_or_fails_clearly(relpath: str) -> None:
    path = H.SHARED_LARK / relpath
    start, _indenter = H.SHARED_CASES.get(relpath, ("start", None))
    text = path.read_text(encoding="utf-8")
    expected = EXPECTED_FAILURES.get(relpath)
    if expected is not None:
        with pytest.raises(GrammarError, match=re.escape(expected)):
            parse_lark(text, start=start, source=str(path), import_paths=[str(path.parent)])
        return
    ir = parse_lark(text, start=start, source=str(path), import_paths=[str(path.parent)])
    grammar = H.compile_lark(H.shared_case(relpath))
    assert list(ir.terminals) == [t for t in grammar.terminals] + sorted(
        DECLARED_PREFIX + d for d in grammar.declared)
    assert set(ir.rules) == set(grammar.rules_by_origin)
    assert ir.ignore == grammar.ignore
    for name, lark_rules in grammar.rules_by_origin.items():
        assert len(ir.rules[name].body.alternatives) == len(lark_rules)


def test_lookaround_idioms_match_exactly_what_python_matches() -> None:
    """Each substituted regex gives the same `re.match` as the lookaround original, everywhere."""
    import itertools
    import re as std_re

    from codemask.grammar.lark import LOOKAROUND_IDIOMS

    alphabet = ['"', "\\", "a", "\n", "é"]
    for original, equivalent in LOOKAROUND_IDIOMS.items():
        for length in range(8):
            for chars in itertools.product(alphabet, repeat=length):
                text = "".join(chars)
                a, b = std_re.match(original, text), std_re.match(equivalent, text)
                assert (a and a.group(0)) == (b and b.group(0)), (original, text)


def test_reserved_pragma_marks_keyword_terminals() -> None:
    """``//! codemask reserved:`` flags the string terminals with those texts, and only them."""
    from codemask.engine.recognizer import Recognizer

    text = '//! codemask reserved: if\nstart: "if" NAME | NAME "." NAME\nNAME: /[a-z]+/\n%ignore " "\n'
    ir = parse_lark(text)
    assert [t.name for t in ir.terminals.values() if t.reserved] == ["IF"]
    reserved = Recognizer(Grammar(ir, "lark"))
    plain = Recognizer(Grammar.from_lark(text.split("\n", 1)[1]))
    assert plain.accepts("a.if") and not reserved.accepts("a.if")  # Lark retypes only among candidates
    assert reserved.accepts("if x") and reserved.accepts("a.iffy")
    assert not reserved.accepts("ifx")  # one identifier, where only the keyword can start
