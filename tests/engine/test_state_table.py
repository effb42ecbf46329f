"""Transition tables that reserve their rows and write each as its state is interned."""

from __future__ import annotations

import numpy as np
import pytest

from codemask.engine import lexer, parser
from codemask.engine.lexer import LexerCore
from codemask.engine.state_table import grown, unwritten_rows
from tests.engine.conftest import compiler
from tests.engine.test_native import assert_same_core, drive, explore_lexer, grammar_of, met_candidate_sets


@pytest.mark.parametrize("rows", [8, 8192])  # (numpy's memory, and from 4 MB on anonymous memory of its own)
def test_unwritten_rows_are_a_writable_table_and_growing_keeps_them(rows: int) -> None:
    table = unwritten_rows(rows, 256)
    assert table.shape == (rows, 256) and table.dtype == np.int32 and table.flags.writeable
    table[:8] = np.arange(8 * 256, dtype=np.int32).reshape(8, 256)
    bigger = grown(table)
    assert bigger.shape == (2 * rows, 256) and bigger.flags.writeable
    assert (bigger[:8] == table[:8]).all()
    bigger[-1] = -2  # (the new rows are written as their states come)
    assert (bigger[-1] == -2).all() and (bigger[:8] == table[:8]).all()


@pytest.mark.parametrize(("source", "lazy"), [("json", False), ("sql", True)])
def test_a_parser_table_that_outgrows_its_reservation_matches_one_that_does_not(
        monkeypatch: pytest.MonkeyPatch, source: str, lazy: bool) -> None:
    """Thousands of states interned into a 64-row reservation (so the table moves six times, from C
    and from Python) give the states and transitions of the default reservation, which never moves."""
    rtn = compiler("llama3").compile(grammar_of(source)).artifacts.rtn
    roomy = drive(rtn, None, 2000, lazy=lazy)
    reserved = len(roomy.table)
    assert roomy.num_states >= 1000 and reserved == parser.RESERVED_STATES
    monkeypatch.setattr(parser, "RESERVED_STATES", 64)
    for use_native in (True, False, None):
        tight = drive(rtn, use_native, 2000, lazy=lazy)
        assert 64 < len(tight.table) < reserved and len(tight.table) >= tight.num_states
        assert_same_core(tight, roomy)
        # every interned state's row was written: no stale memory reads as a transition
        assert (tight.table[: tight.num_states] >= parser.UNKNOWN).all()


def test_a_lexer_table_that_outgrows_its_reservation_matches_one_that_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    core, starts = met_candidate_sets("python", 150)
    roomy = LexerCore(core.lexer.automata)
    explore_lexer(roomy, starts, True, 400)
    reserved = len(roomy.table)
    assert reserved == lexer.RESERVED_LEXER_STATES
    monkeypatch.setattr(lexer, "RESERVED_LEXER_STATES", 16)
    for use_native in (True, False):
        tight = LexerCore(core.lexer.automata)
        explore_lexer(tight, starts, use_native, 400)
        count = len(tight.keys)
        assert count > 16 * 8 and 16 < len(tight.table) < reserved and tight.keys == roomy.keys
        assert (tight.table[:count] == roomy.table[:count]).all()
