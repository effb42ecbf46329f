"""The reference oracle itself: checked by brute force on small grammars, where every sentence up
to a length can be listed, and on the cases it exists for (UTF-8 split across bytes, empty rules,
left recursion, ambiguity, counted repeats, lookaheads)."""

from __future__ import annotations

import itertools
import random

import pytest

import oracle
from codemask.grammar.ebnf import parse_ebnf
from codemask.grammar.ir import ByteClass, GrammarIR, Literal, Repeat, Rule, Sequence

SMALL_GRAMMARS = {
    "left recursion": 'root ::= root "a" | "b"',
    "right recursion": 'root ::= "a" root | "b"',
    "ambiguous": 'root ::= root root | "a" | "b" | ""',
    "balanced": 'root ::= "(" root ")" root | ""',
    "counted": 'root ::= ("a" | "bb"){1,3} "c"?',
    "nullable chain": 'root ::= x y "a"\nx ::= y?\ny ::= x*',
    "unproductive alternative": 'root ::= "a" | dead\ndead ::= "b" dead',
    "classes": 'root ::= [ab]+ [^a-z]',
}


def sentences(ir: GrammarIR, alphabet: bytes, max_len: int) -> set[bytes]:
    """Every sentence up to ``max_len`` bytes over ``alphabet``, by asking the oracle about each."""
    found = set()
    for n in range(max_len + 1):
        for word in itertools.product(alphabet, repeat=n):
            if oracle.accepts(ir, bytes(word)):
                found.add(bytes(word))
    return found


@pytest.mark.parametrize("name", SMALL_GRAMMARS)
def test_viable_prefixes_are_exactly_prefixes_of_sentences(name: str) -> None:
    ir = parse_ebnf(SMALL_GRAMMARS[name])
    alphabet = b"ab()c"
    language = sentences(ir, alphabet, 6)
    # the languages are closed enough that every prefix of length <= 3 that can be completed at
    # all can be completed within 6 bytes
    for n in range(4):
        for word in itertools.product(alphabet, repeat=n):
            prefix = bytes(word)
            assert oracle.is_viable_prefix(ir, prefix) == any(s.startswith(prefix) for s in language), (name, prefix)


def test_known_languages() -> None:
    assert sentences(parse_ebnf(SMALL_GRAMMARS["left recursion"]), b"ab", 3) == {b"b", b"ba", b"baa"}
    assert sentences(parse_ebnf(SMALL_GRAMMARS["counted"]), b"abc", 4) == {
        b"a", b"bb", b"aa", b"abb", b"bba", b"aaa", b"bbbb", b"abba", b"aabb", b"bbaa",
        b"ac", b"bbc", b"aac", b"abbc", b"bbac", b"aaac"}
    assert sentences(parse_ebnf(SMALL_GRAMMARS["unproductive alternative"]), b"ab", 3) == {b"a"}
    assert not oracle.is_viable_prefix(parse_ebnf(SMALL_GRAMMARS["unproductive alternative"]), b"b")


def test_utf8_is_read_per_code_point() -> None:
    ir = parse_ebnf('root ::= [é-ê] "!"')
    e_acute = "é".encode()
    assert oracle.accepts(ir, e_acute + b"!") and oracle.accepts(ir, "ê!".encode())
    assert not oracle.accepts(ir, "ë!".encode())
    assert oracle.is_viable_prefix(ir, e_acute[:1])  # C3: é and ê both start with it
    assert not oracle.is_viable_prefix(ir, b"\xc4")  # Ą.. : outside the class
    assert not oracle.is_viable_prefix(ir, b"\xc3\x28")  # not UTF-8
    negated = parse_ebnf('root ::= [^a]')
    assert oracle.accepts(negated, "😀".encode()) and not oracle.accepts(negated, b"a")
    for bad in [b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xff"]:  # overlong, surrogate, ...
        assert not oracle.accepts(negated, bad) and not oracle.is_viable_prefix(negated, bad[:1] if bad[0] in
                                                                                (0x80, 0xFF, 0xC0) else bad)


def test_bytes_and_literals() -> None:
    ir = GrammarIR({"root": Rule("root", Sequence((Literal(b"\xff\x00"), Repeat(ByteClass(((0x80, 0x81),)), 2, 2))))},
                   "root")
    assert oracle.accepts(ir, b"\xff\x00\x80\x81")
    assert not oracle.accepts(ir, b"\xff\x00\x80")
    assert oracle.is_viable_prefix(ir, b"\xff\x00\x80")


def test_lookahead_restricts_where_a_rule_may_end() -> None:
    ir = parse_ebnf('root ::= word " " word | word "!"\nword ::= [a-z]+ (= " " | "!")')
    assert oracle.accepts(ir, b"ab cd")  # the second word ends the input: the end never contradicts
    assert oracle.accepts(ir, b"ab!")
    ir = parse_ebnf('root ::= a [a-z]*\na ::= "a"+ (= "b")')
    assert oracle.accepts(ir, b"aab") and oracle.accepts(ir, b"aa")
    assert not oracle.accepts(ir, b"aac")  # a may only end before b
    assert not oracle.is_viable_prefix(ir, b"aac") and oracle.is_viable_prefix(ir, b"aa")


def test_samples_are_sentences() -> None:
    rng = random.Random(0)
    for text in SMALL_GRAMMARS.values():
        ir = parse_ebnf(text)
        for _ in range(20):
            assert oracle.accepts(ir, oracle.sample(ir, rng, max_depth=4))
    with pytest.raises(ValueError, match="derives no string"):
        oracle.sample(parse_ebnf("root ::= root"), rng)
    with pytest.raises(ValueError, match="lexer"):
        oracle.accepts(GrammarIR({"root": Rule("root", Literal(b""))}, "root", terminals={"T": object()}),  # type: ignore[dict-item]
                       b"")
