"""The regex front-end against Python's ``re``: for many patterns (hand-written, every JSON Schema
``pattern`` in jsonschemabench, and small random ones from hypothesis) and many strings, the oracle
over the converted grammar accepts exactly what ``re.fullmatch`` (or, with ``search=True``,
``re.search``) accepts; and what cannot be converted exactly is refused with the construct and its
column."""

from __future__ import annotations

import json
import random
import re
import sys
import warnings
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from codemask import Grammar, GrammarError, GrammarSyntaxError
from codemask.grammar.ir import CharClass, Choice, GrammarIR, Literal, Repeat, Rule, Sequence
from codemask.grammar.regex import UnsupportedRegexError, regex_grammar, regex_to_expr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import oracle  # the reference recognizer lives in tests/
from data_paths import corpus_or_skip

MAX = 0x10FFFF


def grammar(pattern: str, flags: int = 0, search: bool = False) -> GrammarIR:
    return GrammarIR({"root": Rule("root", regex_to_expr(pattern, flags, search=search))}, "root")


def python_says(pattern: str, text: str, flags: int = 0, search: bool = False) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (re.search if search else re.fullmatch)(pattern, text, flags) is not None


def assert_agrees(pattern: str, texts: list[str], flags: int = 0) -> None:
    for search in (False, True):
        ir = grammar(pattern, flags, search)
        for text in texts:
            expected = python_says(pattern, text, flags, search)
            assert oracle.accepts(ir, text.encode()) == expected, (pattern, flags, search, text, expected)


def strings_for(pattern: str, ir: GrammarIR, rng: random.Random, count: int = 6) -> list[str]:
    """Sentences of the grammar, their one-character mutants, and random strings over the
    pattern's own characters: the strings most likely to expose a difference."""
    alphabet = sorted(set(pattern) | set("aZ09 _-.@/:\n\té"))
    texts = []
    for _ in range(count):
        try:
            texts.append(oracle.sample(ir, rng, max_depth=4).decode("utf-8"))
        except ValueError:  # the pattern matches nothing
            break
    for text in list(texts):
        i = rng.randrange(len(text) + 1)
        texts += [text[:i] + rng.choice(alphabet) + text[i + 1:], text[:i] + text[i + 1:]]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in range(count)]
    return [t for t in texts if len(t) <= 60]


# --------------------------------------------------------------------------------------------
# The expressions built
# --------------------------------------------------------------------------------------------

def test_expressions_are_normalised() -> None:
    assert regex_to_expr("abc") == Literal(b"abc")
    assert regex_to_expr("^abc$") == Literal(b"abc")  # anchors at the edges hold under fullmatch
    assert regex_to_expr(r"\Aa\.b\Z") == Literal(b"a.b")
    assert regex_to_expr("a{2,5}") == Repeat(Literal(b"a"), 2, 5)  # one counted repeat, never copies
    assert regex_to_expr("(?:ab)*?c+") == Sequence((Repeat(Literal(b"ab"), 0, None), Repeat(Literal(b"c"), 1, None)))
    assert regex_to_expr("x{,3}y{2,}z{4}") == Sequence((Repeat(Literal(b"x"), 0, 3), Repeat(Literal(b"y"), 2, None),
                                                        Repeat(Literal(b"z"), 4, 4)))
    assert regex_to_expr("cat|dog") == Choice((Literal(b"cat"), Literal(b"dog")))
    assert regex_to_expr("[a-cx]") == CharClass(((0x61, 0x63), (0x78, 0x78)))
    assert regex_to_expr(".") == CharClass(((0, 9), (11, 0xD7FF), (0xE000, MAX)))
    assert regex_to_expr("(?s).") == CharClass(((0, 0xD7FF), (0xE000, MAX)))
    assert regex_to_expr("[^a]") == CharClass(((0, 0x60), (0x62, 0xD7FF), (0xE000, MAX)))
    assert regex_to_expr(r"\x41\u00e9\U0001F600\N{EM DASH}\101\0") == Literal("Aé😀—A\x00".encode())
    assert regex_to_expr("a{") == Literal(b"a{") and regex_to_expr("a{1,x}") == Literal(b"a{1,x}")


def test_flags() -> None:
    assert regex_to_expr("a b  # comment\n c", re.VERBOSE) == Literal(b"abc")
    assert regex_to_expr(r"(?x) a \  [ ] \# b") == Literal(b"a  #b")
    assert regex_to_expr("k", re.IGNORECASE) == CharClass(((0x4B, 0x4B), (0x6B, 0x6B), (0x212A, 0x212A)))
    assert regex_to_expr("(?i)1-") == Literal(b"1-")
    assert regex_to_expr("(?ai)k") == CharClass(((0x4B, 0x4B), (0x6B, 0x6B)))
    assert regex_to_expr(r"\d", re.ASCII) == regex_to_expr("(?a)[0-9]") == CharClass(((0x30, 0x39),))
    assert regex_to_expr(".", re.DOTALL) == regex_to_expr("(?s:.)")
    assert regex_to_expr("a", re.UNICODE) == Literal(b"a")
    assert regex_to_expr("a", re.IGNORECASE | re.DOTALL | re.VERBOSE | re.ASCII | re.MULTILINE) == regex_to_expr("[aA]")
    assert regex_to_expr("(?i:a)b") == Sequence((CharClass(((0x41, 0x41), (0x61, 0x61))), Literal(b"b")))
    assert regex_to_expr("(?i)a(?-i:b)") == Sequence((CharClass(((0x41, 0x41), (0x61, 0x61))), Literal(b"b")))
    with pytest.raises(GrammarError, match="LOCALE"):
        regex_to_expr("a", re.LOCALE)


@pytest.mark.parametrize(("escape", "flags"), [(e, f) for e in "dDsSwW" for f in (0, re.ASCII)])
def test_categories_are_pythons(escape: str, flags: int) -> None:
    """\\d, \\w, \\s and their negations, Unicode or ASCII, checked code point by code point on the
    first 0x3100 code points and a sample of the rest."""
    expr = regex_to_expr("\\" + escape, flags)
    assert isinstance(expr, CharClass) and not expr.negated
    rng = random.Random(escape)
    points = list(range(0x3100)) + [rng.randrange(0x3100, MAX + 1) for _ in range(3000)]
    compiled = re.compile("\\" + escape, flags)
    for cp in points:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        inside = any(lo <= cp <= hi for lo, hi in expr.ranges)
        assert inside == (compiled.fullmatch(chr(cp)) is not None), (escape, flags, hex(cp))


CASED = [*"aKkSsIiσςΣµ", "\u212a", "\u017f", "\u0131", "\u0130", "ß", "\u1e9e", "ǅ", "Ω", "\u2126", "я", "\U00010400",
         "\u2160", "Ⓐ", "1", "_"]


@pytest.mark.parametrize("char", CASED)
def test_ignorecase_matches_python(char: str) -> None:
    """Case-insensitive literals and classes match what re matches, including Python's special
    cases (long s, Kelvin sign, dotless i, Greek final sigma, titlecase digraphs, non-BMP)."""
    candidates = {c for c in (char.lower(), char.upper(), char.casefold(), char.title()) if len(c) == 1}
    candidates |= {char, *CASED, "μ", "ω", "ǆ", "Ǆ", "\U00010428", "\u2170", "ⓐ", "ß"}
    for flags in (re.IGNORECASE, re.IGNORECASE | re.ASCII):
        escaped = re.escape(char)
        for pattern in (escaped, f"[{escaped}]", f"[^{escaped}]", f"[{escaped}-{escaped}]"):
            ir = grammar(pattern, flags)
            for candidate in candidates:
                assert oracle.accepts(ir, candidate.encode()) == python_says(pattern, candidate, flags), \
                    (pattern, flags, candidate)


# --------------------------------------------------------------------------------------------
# Realistic patterns
# --------------------------------------------------------------------------------------------

HANDWRITTEN = [
    r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}",
    r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$",
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
    r"[_a-zA-Z][_a-zA-Z0-9]*",
    r"\w+",
    r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?",
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[\da-z-]+(?:\.[\da-z-]+)*)?",
    r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)",
    r"#?([0-9a-f]{3}){1,2}",
    r"https?://[^\s/$.?#].[^\s]*",
    r"\+?1?\s*\(?\d{3}\)?[-.\s]?\d{3}[-.\s]?\d{4}",
    r"^[A-Z]{2}\d{2}[A-Z0-9]{1,30}$",
    r"(?i)^(true|false|yes|no)$",
    r"\s*#.*",
    r"[^\W\d_]+",
    r"(?x) (?P<year> \d{4} ) - (?P<month> \d\d )  # ISO month",
    r"\bword\b",
    r"\w+\b\s+\b\w+",
    r"(?m)^\s*$",
    r"a*+b",
    r"(?>[a-z]+)\d",
    r"[\u4e00-\u9fff]+",
    r".{2,5}?x",
    r"(a|ab)(c|bcd)(d*)",
]


@pytest.mark.parametrize("pattern", HANDWRITTEN)
def test_handwritten_patterns_agree_with_re(pattern: str) -> None:
    rng = random.Random(pattern)
    ir = regex_grammar(pattern)
    assert_agrees(pattern, strings_for(pattern, ir, rng, count=8))


@cache
def jsonschemabench_patterns() -> list[str]:
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    found.add(value)
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted(corpus_or_skip("jsonschemabench").glob("*.json")):
        walk(json.loads(path.read_text(encoding="utf-8"))["schema"])
    return sorted(found)


def test_every_jsonschemabench_pattern_converts_or_is_refused_with_a_reason() -> None:
    patterns = jsonschemabench_patterns()
    assert len(patterns) > 1000
    refused = []
    for pattern in patterns:
        for search in (False, True):
            try:
                regex_to_expr(pattern, search=search)
            except UnsupportedRegexError as exc:
                assert re.search(r"lookahead|lookbehind|back-reference|anchor|possessive|atomic", exc.reason), exc
                assert 1 <= exc.column <= len(pattern)
                refused.append(pattern)
    assert len(set(refused)) <= 0.02 * len(patterns), refused


def test_jsonschemabench_patterns_agree_with_re() -> None:
    rng = random.Random(4)
    checked = 0
    for pattern in jsonschemabench_patterns()[::4]:
        try:
            ir = regex_grammar(pattern)
        except UnsupportedRegexError:
            continue
        assert_agrees(pattern, strings_for(pattern, ir, rng, count=3))
        checked += 1
    assert checked > 300


# --------------------------------------------------------------------------------------------
# Random small patterns over a small alphabet
# --------------------------------------------------------------------------------------------

ATOMS = ["a", "b", "é", "K", "k", "\\n", ".", "[ab]", "[^a]", "[a-c]", "[]a]", "[\\w-]", "[\\s\\d]", "[^\\W\\d]",
         "\\d", "\\w", "\\s", "\\W", "\\.", "\\x41", "\\141", "\\0", "\\N{LATIN SMALL LETTER B}", "(?i:k)", "(?-i:a)",
         "(?a:\\w)", "(?s:.)", "(?x: a b )", "(?#c)", "(?P<n>a)", "^", "$", "\\A", "\\Z", "\\b", "\\B", "(?m:^)",
         "(?m:$)", "{}", "a{", "ſ", "[\\b]", "(?i:[^k])"]
QUANTIFIERS = ["", "", "", "*", "+", "?", "{2}", "{1,2}", "{,2}", "{2,}", "*?", "+?", "??", "{1,2}?", "*+", "++", "?+"]
ALPHABET = "abK\nké1_ -.ſ\u212aA\x08{}"


def regexes() -> st.SearchStrategy[str]:
    atom = st.builds(lambda a, q: a + q, st.sampled_from(ATOMS), st.sampled_from(QUANTIFIERS))
    return st.recursive(atom, lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map("".join),
        st.builds(lambda alts, q: "(" + "|".join(alts) + ")" + q, st.lists(inner, min_size=1, max_size=3),
                  st.sampled_from(QUANTIFIERS)),
        st.builds(lambda body, q: "(?:" + body + ")" + q, inner, st.sampled_from(QUANTIFIERS)),
        st.builds(lambda body, q: "(?>" + body + ")" + q, inner, st.sampled_from(["", "*", "?"])),
    ), max_leaves=6)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(pattern=regexes(), flags=st.sampled_from([0, 0, re.I, re.A, re.S, re.M, re.I | re.A, re.X]),
       texts=st.lists(st.text(alphabet=ALPHABET, max_size=6), min_size=1, max_size=8))
def test_random_patterns_agree_with_re(pattern: str, flags: int, texts: list[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern, flags)
        except re.error:
            with pytest.raises(GrammarSyntaxError):
                regex_to_expr(pattern, flags)
            return
    for search in (False, True):
        # CPython's search skips start positions by the pattern's first characters computed
        # under the global flags only, so (?u:\w) under re.ASCII finds nothing: a re bug.
        if search and flags & re.ASCII and "(?u" in pattern:
            continue
        try:
            ir = grammar(pattern, flags, search)
        except UnsupportedRegexError:
            assume(False)
        for text in texts:
            assert oracle.accepts(ir, text.encode()) == python_says(pattern, text, flags, search), \
                (pattern, flags, search, text)


# --------------------------------------------------------------------------------------------
# Search semantics and anchors
# --------------------------------------------------------------------------------------------

def test_search_semantics() -> None:
    cases = {
        "abc": (["abc", "xxabcyy", "ab\nabc"], ["ab", "", "a b c"]),
        "^abc": (["abc", "abcdef"], ["xabc", "\nabc"]),
        "abc$": (["abc", "xabc", "xabc\n"], ["abcx", "abc\n\n"]),
        r"abc\Z": (["xabc"], ["abc\n"]),
        "^$": (["", "\n"], ["a", "\n\n"]),
        "(?m)^foo$": (["foo", "a\nfoo\nb", "foo\n"], ["afoo", "foob\n"]),
        r"\bfoo\b": (["foo", "a foo.", "foo-bar"], ["food", "afoo", "_foo"]),
        r"\Bfoo": (["afoo", "_foo"], ["foo", " foo"]),
        "(?:^|,)a": (["a", "x,a", "ab"], ["ba", "b a"]),
        "": (["", "anything"], []),
        "a*+": (["", "b"], []),
    }
    for pattern, (matching, other) in cases.items():
        ir = grammar(pattern, search=True)
        for text in matching + other:
            assert python_says(pattern, text, search=True) == (text in matching), (pattern, text)
            assert oracle.accepts(ir, text.encode()) == (text in matching), (pattern, text)


def test_anchors_decided_by_their_surroundings() -> None:
    supported = [r"a\n^b", r"(?m)a\n^b", r"(?m)a$\nb", r"\w+\b \b\w+", r"a\Bb", r"(^a|^b)c", r"a(b$|c$)", r"^\bfoo",
                 r"a^b", r"a\Ab", r"a$b", r"(?m)a$b", r"\ba\b|\B-", r"(?m)x\n^", r"\A\Z", r"^(?:$|a)", r"\B"]
    rng = random.Random(1)
    for pattern in supported:
        texts = ["", "a\nb", "a b", "ab", "ac", "bc", "foo", "x\n", "-", "a", "a\n"] + \
            ["".join(rng.choice("ab\n -xfo") for _ in range(rng.randint(0, 5))) for _ in range(30)]
        assert_agrees(pattern, texts)


@pytest.mark.parametrize(("pattern", "column", "construct"), [
    ("ab(?=c)", 3, "lookahead (?=...)"),
    ("a(?!b)c", 2, "lookahead (?!...)"),
    ("(?<=a)b", 1, "lookbehind (?<=...)"),
    ("x(?<!a)b", 2, "lookbehind (?<!...)"),
    (r"(a)b\1", 5, "back-reference \\1"),
    ("(?P<x>a)(?P=x)", 9, "back-reference (?P=...)"),
    ("(a)?(?(1)b|c)", 5, "conditional"),
    ("a?^b", 3, "anchor ^"),
    (r"a?\Ab", 3, "anchor \\A"),
    ("a$\n?", 2, "anchor $"),
    (r"(?m)a$\s", 6, "anchor $"),
    (r"(a\Z)+", 3, "anchor \\Z"),
    (r"a\b.", 2, "anchor \\b"),
    (r"\B.", 1, "anchor \\B"),
    ("a*+a", 2, "possessive quantifier"),
    ("(?:ab|a)++b", 9, "possessive quantifier"),
    ("(?>a|ab)c", 1, "atomic group"),
    ("(?>a*?)a", 1, "atomic group"),
])
def test_unsupported_constructs_are_refused_at_their_column(pattern: str, column: int, construct: str) -> None:
    with pytest.raises(UnsupportedRegexError) as info:
        regex_to_expr(pattern)
    assert info.value.column == column and construct in info.value.reason, str(info.value)
    assert isinstance(info.value, GrammarSyntaxError) and info.value.snippet == pattern.split("\n")[0]


@pytest.mark.parametrize("pattern", ["a(b", "a)b", "[a-", "a**", "x{2,1}", r"\q", "(?P<1>a)", "(?<x>a)", r"\8"])
def test_invalid_patterns_raise_syntax_errors_where_python_does(pattern: str) -> None:
    with pytest.raises(re.error) as python:
        re.compile(pattern)
    with pytest.raises(GrammarSyntaxError) as ours:
        regex_to_expr(pattern)
    assert ours.value.column == (python.value.pos or 0) + 1
    assert python.value.msg in ours.value.reason


def test_regex_grammar_and_grammar_from_regex() -> None:
    ir = regex_grammar(r"\d+", re.ASCII)
    assert list(ir.rules) == ["root"] and ir.start == "root" and not ir.lexer_mode
    assert ir.rules["root"].body == Repeat(CharClass(((0x30, 0x39),)), 1, None)
    grammar_ = Grammar.from_regex("[a-z]+@[a-z]+")
    assert grammar_.kind == "regex" and oracle.accepts(grammar_.ir, b"me@example")
    assert not oracle.accepts(grammar_.ir, b"me@")
    assert oracle.is_viable_prefix(grammar_.ir, b"me@")
