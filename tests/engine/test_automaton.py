"""Rule automata: trimming, minimisation and the cross-compilation cache, against brute force."""

from __future__ import annotations

import itertools

import numpy as np

from codemask.engine.automaton import BYTE_ALPHABET, DFA, compile_expr, distinct_rows, minimize, trim
from codemask.grammar.ebnf import parse_ebnf


def body(text: str, rule: str = "root"):  # type: ignore[no-untyped-def]
    return parse_ebnf(text).rules[rule].body


def accepts(dfa: DFA, data: bytes) -> bool:
    state = dfa.start
    for b in data:
        state = int(dfa.trans[state, b])
        if state < 0:
            return False
    return bool(dfa.accepting[state])


def test_compiled_rule_accepts_exactly_its_language() -> None:
    dfa = compile_expr(body('root ::= ("ab" | "a" [0-9]+) "c"?'), {}, BYTE_ALPHABET)
    for n in range(5):
        for word in itertools.product(b"abc09", repeat=n):
            data = bytes(word)
            expected = data in (b"ab", b"abc") or (len(data) >= 2 and data[0:1] == b"a" and (
                data[1:].isdigit() or (data.endswith(b"c") and data[1:-1].isdigit() and len(data) > 2)))
            assert accepts(dfa, data) == expected, data


def test_trim_drops_states_that_cannot_reach_acceptance_and_minimize_merges_equal_ones() -> None:
    # 0 -a-> 1 (accepting), 0 -b-> 2 -b-> 3 (dead loop on 3), 0 -c-> 4 (accepting, same as 1)
    trans = np.full((5, BYTE_ALPHABET), -1, dtype=np.int32)
    trans[0, ord("a")], trans[0, ord("b")], trans[2, ord("b")], trans[3, ord("b")] = 1, 2, 3, 3
    trans[0, ord("c")] = 4
    dfa = DFA(trans=trans, accepting=np.array([False, True, False, False, True]), calls=[{} for _ in range(5)])
    trimmed = trim(dfa)
    assert len(trimmed.accepting) == 3  # 2 and 3 are gone
    assert not accepts(trimmed, b"b") and accepts(trimmed, b"a") and accepts(trimmed, b"c")
    assert len(minimize(trimmed).accepting) == 2


def test_cached_automata_depend_on_the_callee_indices() -> None:
    expr = body("root ::= x \"!\"\nx ::= \"x\"")
    first = compile_expr(expr, {"root": 0, "x": 1}, BYTE_ALPHABET)
    again = compile_expr(expr, {"root": 5, "x": 1}, BYTE_ALPHABET)
    other = compile_expr(expr, {"root": 0, "x": 2}, BYTE_ALPHABET)
    assert again is first  # same body, same callee: shared
    assert [c for c in other.calls if c] == [{2: 1}] and [c for c in first.calls if c] == [{1: 1}]
    assert not first.trans.flags.writeable  # shared automata cannot be changed by one user


def test_distinct_rows_numbers_rows_as_numpy_unique_does() -> None:
    rng = np.random.default_rng(0)
    for width in (1, 3, 258, 5000):  # 5000 columns: beyond the hash weights, the exact fallback
        table = rng.integers(-1, 3, size=(400, width))
        table[200:] = table[rng.integers(0, 200, size=200)]  # many repeated rows
        first, classes = distinct_rows(table)
        _, expected = np.unique(table, axis=0, return_inverse=True)
        expected = expected.reshape(-1)
        # same partition of the rows, and each class's first row is a member of it
        assert len(first) == len(set(expected.tolist()))
        assert all((classes == classes[i]).tolist() == (expected == expected[i]).tolist() for i in range(0, 400, 7))
        assert (table[first[classes]] == table).all()
