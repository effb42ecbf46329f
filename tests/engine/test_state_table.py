"""Transition tables that reserve their rows and write each as its state is interned."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from codemask.engine import lexer, parser, state_table
from codemask.engine.lexer import LexerCore
from codemask.engine.state_table import SPARE_TABLES, grown, unwritten_rows
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


def test_a_dropped_tables_memory_goes_to_the_next_table_once_no_view_of_it_is_left() -> None:
    SPARE_TABLES.clear()
    table = unwritten_rows(8192, 256)
    table[:] = 7
    row = table[3]
    del table
    gc.collect()
    assert len(SPARE_TABLES) == 0  # (a view still reads it)
    del row
    assert len(SPARE_TABLES) == 1
    larger = unwritten_rows(16384, 256)  # (more than the one kept holds: fresh memory)
    assert len(SPARE_TABLES) == 1 and larger[0, 0] == 0
    again = unwritten_rows(6000, 256)  # (the one kept: its memory, rows as they were)
    assert len(SPARE_TABLES) == 0 and again.shape == (6000, 256) and (again == 7).all()
    again[:] = 1
    assert (again == 1).all()
    del larger, again
    SPARE_TABLES.clear()


def test_the_spare_tables_keep_a_bounded_number_of_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    SPARE_TABLES.clear()
    tables = [unwritten_rows(4096, 256) for _ in range(state_table.SPARE_BUFFERS + 2)]
    del tables
    assert len(SPARE_TABLES) == state_table.SPARE_BUFFERS
    SPARE_TABLES.clear()
    monkeypatch.setattr(state_table, "SPARE_BYTES", 3 * 4096 * 256 * 4)
    tables = [unwritten_rows(4096, 256) for _ in range(4)]
    del tables
    assert len(SPARE_TABLES) == 3
    SPARE_TABLES.clear()


@pytest.mark.parametrize("source", ["json", "Kubernetes---kb_474_Normalized.json"])
def test_a_parser_core_in_a_dropped_cores_memory_matches_one_in_fresh_memory(
        monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    """The rows a dropped core wrote (other states, other transitions) are never read as this
    core's: every state writes its own row when interned."""
    monkeypatch.setattr(parser, "RESERVED_STATES", 4096)  # (4 MB: tables of their own memory)
    rtn = compiler("llama3").compile(grammar_of(source)).artifacts.rtn
    other = compiler("llama3").compile(grammar_of("python_function")).artifacts.rtn
    SPARE_TABLES.clear()
    fresh = drive(rtn, True, 1500)
    SPARE_TABLES.clear()
    dropped = drive(other, True, 1500)
    assert dropped.num_states >= 1000
    del dropped
    gc.collect()
    assert len(SPARE_TABLES) >= 1
    reused = drive(rtn, True, 1500)
    assert len(SPARE_TABLES) == 0
    assert_same_core(reused, fresh)
    assert (reused.table[: reused.num_states] >= parser.UNKNOWN).all()


def test_the_c_interner_writes_into_the_arrays_a_python_grow_rebinds() -> None:
    """The C side keeps the core's table, flags and has_stacks between states: when the core grows
    them (`ParserCore._grow`, from Python here, in the middle of a breadth-first fill), the states
    interned after go into the new arrays, as in a core that never grew."""

    def filled(grow_at: int | None) -> parser.ParserCore:
        core = parser.ParserCore(compiler("llama3").compile(grammar_of("json")).artifacts.rtn)
        frontier, i = [core.initial], 0
        while i < len(frontier) and len(frontier) < 600:
            if i == grow_at:
                core._grow()
            core.fill_rows(np.array([frontier[i]]))
            frontier += [s for s in dict.fromkeys(core.table[frontier[i]].tolist()) if s >= 0 and s not in frontier]
            i += 1
        return core

    grown_core, plain = filled(20), filled(None)
    assert len(grown_core.table) == 2 * len(plain.table) and grown_core.num_states >= 500
    assert_same_core(grown_core, plain)
