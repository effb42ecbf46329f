"""Large grammars build in time near-linear in their size, or are refused with a clear
`GrammarError`: an enum of 100,000 values, 100,000 alternatives, a chain of 100,000 rules.

Before: a 16,000-value enum took 64 s (every value validated against the whole enum), 40,000
alternatives 135 s (each deduplicated against all before it), and a chain of rules hit a
`RecursionError` (the chain, inlined, nested a thousand levels deep) or quadratic fixed points.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from codemask import Grammar, GrammarCompiler, GrammarMatcher
from codemask.engine.automaton import NFA, NFABuilder, determinize, minimal_word_automaton, minimize, trim
from codemask.errors import GrammarError
from codemask.grammar.ir import Choice, Literal
from tests.engine.conftest import vocabulary

N = 100_000


def compiled(grammar: Grammar) -> GrammarMatcher:
    return GrammarMatcher(GrammarCompiler(vocabulary("gpt2"), cache_dir=False, progress=False).compile(grammar))


def accepts(matcher: GrammarMatcher, text: bytes) -> bool:
    twin = matcher.fork()
    return twin.accept_bytes(text) and twin.can_terminate()


def test_an_enum_of_100k_values_compiles_and_is_exact() -> None:
    values = [f"value_{i}" for i in range(N)]
    matcher = compiled(Grammar.from_json_schema({"enum": values}))
    for text in (b'"value_0"', b'"value_99999"', b'"value_31337"'):
        assert accepts(matcher, text), text
    for text in (b'"value_100000"', b'"value_"', b'"value_01"', b'"valu"'):
        assert not accepts(matcher, text), text


def test_100k_alternatives_compile_and_are_exact() -> None:
    matcher = compiled(Grammar.from_ebnf("root ::= " + " | ".join(f'"w{i}x"' for i in range(N))))
    assert accepts(matcher, b"w0x") and accepts(matcher, b"w99999x") and accepts(matcher, b"w4242x")
    assert not accepts(matcher, b"w100000x") and not accepts(matcher, b"w00x") and not accepts(matcher, b"w1")


@pytest.mark.slow  # (10-40 s on two shared cores)
@pytest.mark.parametrize("with_exit", [False, True])
def test_a_chain_of_100k_rules_compiles(with_exit: bool) -> None:
    """``r_i ::= "a" r_{i+1}`` down to ``"b"`` (with ``| "c"``: every rule may stop there)."""
    rules = "\n".join(f'r{i} ::= "a" r{i + 1}' + (' | "c"' if with_exit else "") for i in range(N))
    matcher = compiled(Grammar.from_ebnf(f'root ::= r0\n{rules}\nr{N} ::= "b"'))
    assert accepts(matcher, b"a" * N + b"b")
    assert not accepts(matcher, b"a" * (N - 1) + b"b")
    assert accepts(matcher, b"aaac") == with_exit


def test_a_set_of_strings_too_large_for_one_rule_is_refused_clearly() -> None:
    """100,000 random words have no small automaton (about 150,000 states, a 150 MB table): the
    refusal names the rule, the limit and the usual causes."""
    rng = random.Random(0)
    words = {"".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(4, 12)))
             for _ in range(N)}
    with pytest.raises(GrammarError, match=r"rule 'root': grammar is too large to compile \(over 100,000 "
                                           r"deterministic automaton states in one rule\); an enum or alternation"):
        compiled(Grammar.from_ebnf("root ::= " + " | ".join(f'"{w}"' for w in sorted(words))))


@pytest.mark.parametrize("seed", range(12))
def test_the_word_automaton_is_the_minimal_automaton_of_its_words(seed: int) -> None:
    """Differential: the incremental construction accepts exactly its words and has as many
    states as the subset construction and Moore minimisation of one chain per word."""
    rng = random.Random(seed)
    alphabet = "ab" if seed % 2 else "abc\xe9"
    words = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 7))).encode()
                    for _ in range(rng.randrange(1, 60))})
    trans, final = minimal_word_automaton(words)
    found = set()
    todo = [(0, b"")]
    while todo:
        state, text = todo.pop()
        if final[state]:
            found.add(text)
        todo.extend((target, text + bytes([byte])) for byte, target in trans[state].items())
    assert found == set(words)
    nfa = NFA()
    start, end = nfa.new_state(), nfa.new_state()
    builder = NFABuilder(nfa, {}, None)
    for word in words:  # one chain per word, the construction `_literal_set` replaces
        builder.build(Literal(word), start, end)
    reference = minimize(trim(determinize(nfa, start, end, 256)))
    assert len(trans) == len(reference.accepting)


def test_literal_alternatives_mixed_with_other_expressions_keep_their_language() -> None:
    """A choice of literals and other expressions: the literals go through the word automaton,
    the rest as before; the masks along strings of each kind agree with a grammar written
    without the shared-prefix set (each literal in its own rule)."""
    words = [f"{a}{b}" for a, b in itertools.product(["ab", "abc", "b", ""], ["", "d", "dd"])]
    body = " | ".join(f'"{w}"' for w in words) + ' | [x-z]+ | "a" [0-9]'
    separate = "\n".join(f'w{i} ::= "{w}"' for i, w in enumerate(words))
    alternatives = " | ".join(f"w{i}" for i in range(len(words)))
    one = compiled(Grammar.from_ebnf(f"root ::= {body}"))
    other = compiled(Grammar.from_ebnf(f'root ::= {alternatives} | [x-z]+ | "a" [0-9]\n{separate}'))
    assert isinstance(Grammar.from_ebnf(f"root ::= {body}").ir.rules["root"].body, Choice)
    for text in [w.encode() for w in words] + [b"xyz", b"a7", b"abcdd", b"abd", b"abcddd", b"c", b"a"]:
        assert accepts(one, text) == accepts(other, text), text
        rows = np.zeros((2, (one.compiled.vocab_size + 31) // 32), dtype=np.int32)
        first, second = one.fork(), other.fork()
        for byte in text:
            first.fill_next_token_bitmask(rows, 0)
            second.fill_next_token_bitmask(rows, 1)
            assert (rows[0] == rows[1]).all(), text
            if not (first.accept_bytes(bytes([byte])) and second.accept_bytes(bytes([byte]))):
                break
