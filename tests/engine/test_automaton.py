"""Rule automata: trimming, minimisation and the cross-compilation cache, against brute force."""

from __future__ import annotations

import contextlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from codemask import Grammar
from codemask.engine import automaton, native
from codemask.engine.automaton import BYTE_ALPHABET, DFA, _build_dfa, compile_expr, distinct_rows, minimize, trim
from codemask.errors import GrammarError
from codemask.grammar.ebnf import parse_ebnf
from codemask.grammar.ir import (
    ByteClass,
    CharClass,
    Choice,
    Literal,
    Repeat,
    RuleRef,
    Sequence,
    TerminalRef,
    grammar_text,
    to_text,
)
from codemask.grammar.optimize import optimize
from codemask.grammar.regex import regex_to_expr
from tests.data_paths import TEST_DATA

ROOT = Path(__file__).resolve().parents[2]
BENCH = TEST_DATA / "jsonschemabench"
PYTHON_FUNCTION = ROOT / "grammars" / "python_function.ebnf"


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


def rule_automata(grammar: Grammar, use_native: bool = False) -> list[DFA]:
    """Every rule's minimised DFA, built afresh (not from the cross-compilation cache), in Python or in C.
    A lexer-mode grammar's parser rules are over its terminals."""
    ir = optimize(grammar.ir)
    rule_index = {name: i for i, name in enumerate(ir.rules)}
    terminals = {name: i for i, name in enumerate(ir.terminals)} if ir.lexer_mode else None
    alphabet = max(len(ir.terminals), 1) if ir.lexer_mode else BYTE_ALPHABET
    with native.using(use_native):
        return [_build_dfa(rule.body, rule_index, alphabet, terminals) for rule in ir.rules.values()]


def test_acyclic_automata_minimised_level_by_level_equal_moores_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = json.loads((BENCH / "Kubernetes---kb_474_Normalized.json").read_text())["schema"]
    grammars = [Grammar.from_json_schema(schema, mode="validate"), Grammar.from_ebnf(PYTHON_FUNCTION.read_text()),
                Grammar.from_regex("(alpha|beta|gamma)-[0-9]{2,5}(\\.(rc|dev)[0-9])?")]
    moore = [rule_automata(g) for g in grammars]
    monkeypatch.setattr(automaton, "MOORE_ROUNDS", 1)  # levels as soon as a second round is needed
    classify = automaton._acyclic_classes
    used = []

    def counted(accepting: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, int] | None:
        found = classify(accepting, targets)
        used.append(found is not None)
        return found

    monkeypatch.setattr(automaton, "_acyclic_classes", counted)
    levelled = [rule_automata(g) for g in grammars]
    for before, after in zip(itertools.chain(*moore), itertools.chain(*levelled), strict=True):
        assert np.array_equal(before.trans, after.trans) and np.array_equal(before.accepting, after.accepting)
        assert before.calls == after.calls
    assert sum(used) >= 3 and not all(used)  # both paths were taken


def test_a_long_literal_compiles_to_a_chain() -> None:
    literal = "".join(chr(97 + (i * 3) % 26) for i in range(20000))  # Moore: one round per state
    dfa = compile_expr(regex_to_expr(literal), {}, BYTE_ALPHABET)
    assert len(dfa.accepting) == len(literal) + 1
    assert accepts(dfa, literal.encode()) and not accepts(dfa, literal[:-1].encode() + b"!")


def c_and_python_grammars() -> list[Grammar]:
    """Real grammars of every kind the C construction meets: JSON Schemas of the sample in both
    modes (strings with escapes and UTF-8 classes, counted lengths, key complements, numbers),
    EBNF, a regex, and a Lark grammar's parser rules over its terminals."""
    grammars = [Grammar.builtin("json"), Grammar.from_ebnf(PYTHON_FUNCTION.read_text()), Grammar.builtin("sql"),
                Grammar.from_regex("[\\u00e9-\\u8000a-z]{3,40}@(x|y{2,})[^\\x00-\\x1f\\u2028]*")]
    for path in sorted(BENCH.glob("*.json"))[::5]:
        schema = json.loads(path.read_text())["schema"]
        for mode in ("generate", "validate"):
            with contextlib.suppress(GrammarError):
                grammars.append(Grammar.from_json_schema(schema, mode=mode))
    return grammars


def test_c_automata_are_the_python_automata_numbered_alike() -> None:
    """The C construction (`native.dfa_of_expr`: its own NFA, UTF-8 split and minimisation) against
    `minimize(trim(determinize(...)))`: the same transitions, acceptance and calls, state for state."""
    assert native.available()
    rules = states = 0
    for grammar in c_and_python_grammars():
        for c_dfa, py_dfa in zip(rule_automata(grammar, True), rule_automata(grammar, False), strict=True):
            assert c_dfa.trans.shape == py_dfa.trans.shape and np.array_equal(c_dfa.trans, py_dfa.trans)
            assert np.array_equal(c_dfa.accepting, py_dfa.accepting) and c_dfa.calls == py_dfa.calls
            assert "first_bytes" in c_dfa.__dict__  # (set by C as it made the runs; the Python one's from the rows)
            assert isinstance(c_dfa, automaton.RunsDFA) and not c_dfa.trans.flags.writeable
            assert np.array_equal(c_dfa.first_bytes, py_dfa.first_bytes)
            rules += 1
            states += len(c_dfa.accepting)
    assert rules > 500 and states > 10_000


def test_the_network_laid_out_in_c_is_the_numpy_one() -> None:
    """`build_rtn` lays the rules' automata end to end in one C pass (`native.stack_tables`), which
    also finds the states with a transition: the same table and `scanning` as numpy's."""
    laid = 0
    for grammar in c_and_python_grammars():
        ir = optimize(grammar.ir)
        if ir.lexer_mode:
            continue
        bodies = {name: rule.body for name, rule in ir.rules.items()}
        laid += 1
        fast = automaton.build_rtn(bodies, ir.start)
        with native.using(False):
            slow = automaton.build_rtn(bodies, ir.start)
        assert np.array_equal(fast.trans, slow.trans) and fast.calls == slow.calls
        assert np.array_equal(fast.scanning, (slow.trans >= 0).any(axis=1)) and fast.scanning.any()
        assert fast.in_range and not slow.in_range  # (only C's pass checks every target)
    assert laid > 3
    out = np.empty((3, 4), dtype=np.int32)
    with pytest.raises(IndexError):
        native.stack_tables([np.full((2, 4), 2, dtype=np.int32)], out)  # (a target past its rule)
    with pytest.raises(IndexError):
        native.stack_tables([np.full((3, 4), -2, dtype=np.int32)], out)  # (below "none")
    with pytest.raises(ValueError):
        native.stack_tables([np.zeros((2, 4), dtype=np.int32)], out)  # (fewer rows than out)


def test_runs_are_written_as_the_rows_they_stand_for() -> None:
    """C's automata keep their transitions as runs (`RunsDFA`), which `stack_tables` writes as dense
    rows: a network of runs and dense tables mixed is numpy's table of the dense rows, and a run
    that leaves its row or its rule is refused."""
    grammar = Grammar.from_json_schema(json.loads((BENCH / "Github_easy---o35904.json").read_text())["schema"])
    ir = optimize(grammar.ir)
    automaton.clear_rule_automata()  # (fresh automata: none of their rows written by another test)
    automata = [compile_expr(rule.body, {name: i for i, name in enumerate(ir.rules)}, BYTE_ALPHABET)
                for rule in ir.rules.values()]
    assert all(isinstance(dfa, automaton.RunsDFA) for dfa in automata) and "trans" not in automata[0].__dict__
    mixed = [dfa.rows_or_runs if i % 2 else np.array(dfa.trans) for i, dfa in enumerate(automata)]
    sizes = [len(dfa.accepting) for dfa in automata]
    out = np.empty((sum(sizes), BYTE_ALPHABET), dtype=np.int32)
    scanning = native.stack_tables(mixed, out)
    offsets = np.repeat(np.cumsum([0, *sizes[:-1]]), sizes).astype(np.int32)[:, None]
    dense = np.concatenate([dfa.trans for dfa in automata])
    assert np.array_equal(out, np.where(dense >= 0, dense + offsets, -1))
    assert np.array_equal(scanning, (dense >= 0).any(axis=1))
    runs = np.array([[0, 9, 1], [20, 20, 0]], dtype=np.int32)
    run_lo = np.array([0, 2, 2], dtype=np.int32)
    two = np.empty((2, 32), dtype=np.int32)
    assert native.stack_tables([(runs, run_lo)], two).tolist() == [True, False]
    assert two[0, :10].tolist() == [1] * 10 and two[0, 20] == 0 and (two[1] == -1).all() and two[0, 10] == -1
    for bad_runs, bad_lo, error in [
        ([[0, 9, 2]], [0, 1, 1], IndexError),  # (a target past its rule)
        ([[0, 32, 1]], [0, 1, 1], ValueError),  # (past the row's end)
        ([[5, 4, 1]], [0, 1, 1], ValueError),  # (an empty run)
        ([[0, 1, 1]], [0, 2, 1], ValueError),  # (offsets out of order)
        ([[0, 1, 1]], [1, 1, 1], ValueError),  # (offsets that miss a run)
    ]:
        with pytest.raises(error):
            native.stack_tables([(np.array(bad_runs, dtype=np.int32), np.array(bad_lo, dtype=np.int32))], two)


def test_the_c_text_of_every_rule_is_the_python_text() -> None:
    """`native.expr_text` writes the canonical text that keys the compile cache: it must be
    `to_text`'s, character for character (escaped literals, negated and byte classes, open repeats)."""
    assert native.available()
    words = Literal("é\"'\n\x00🙂".encode() + b"\xff\\")
    controls = Repeat(CharClass(((0, 0x1F), (0x2028, 0x10FFFF)), True), 2, None)
    odd = Sequence((words, controls, Repeat(ByteClass(((0x80, 0xBF),)), 0, 3),
                    Choice((TerminalRef("T"), RuleRef("r"), Literal(b"\xff")))))
    assert native.expr_text(odd) == to_text(odd)
    compared = 0
    for grammar in c_and_python_grammars():
        ir = grammar.ir
        for rule in ir.rules.values():
            for expr in (rule.body, rule.lookahead):
                if expr is not None:
                    assert native.expr_text(expr) == to_text(expr)
                    compared += 1
        with native.using(False):
            python_text = grammar_text(ir)
        assert grammar_text(ir) == python_text
    assert compared > 1000
    with pytest.raises(TypeError, match="not a grammar expression"):
        native.expr_text(Sequence(("a",)))  # type: ignore[arg-type]


def test_c_construction_reports_bad_and_oversized_expressions(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(GrammarError, match="max < min"):
        compile_expr(Repeat(Literal(b"a"), 3, 2), {}, BYTE_ALPHABET)
    with pytest.raises(GrammarError, match="terminal 'T' used in a grammar without a lexer"):
        compile_expr(TerminalRef("T"), {}, BYTE_ALPHABET)
    with pytest.raises(KeyError):
        compile_expr(RuleRef("missing"), {}, BYTE_ALPHABET)
    monkeypatch.setattr(automaton, "MAX_NFA_STATES", 1000)
    with pytest.raises(GrammarError, match=r"too large to compile \(over 1,000 automaton states\); an enum"):
        compile_expr(Repeat(Literal(b"ab"), 0, 900), {}, BYTE_ALPHABET)
    monkeypatch.setattr(automaton, "MAX_DFA_STATES", 50)
    with pytest.raises(GrammarError, match="over 50 deterministic automaton states"):
        compile_expr(Repeat(Literal(b"ab"), 0, 90), {}, BYTE_ALPHABET)
    with pytest.raises(TypeError, match="not a grammar expression"):
        compile_expr(Sequence(("a",)), {}, BYTE_ALPHABET)  # type: ignore[arg-type]
