"""The C extension (`codemask.engine._native`) against the numpy walk and Python parser it replaces.

Both walks — the parser's, and the lexer's of lexer-mode grammars — classify every position of
real grammars on real vocabularies from fresh cores (so the C walk meets unknown transitions and
goes round the fill-and-resume loop); the results must be identical. Two parser cores of real
grammars, one with the C closures and one in Python, driven through the same operations, must
intern the same stack nodes and parser states with the same ids and fill the same transition
tables. Bad arguments must raise, not read out of bounds.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import random
import textwrap
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from codemask import Grammar, GrammarCompiler, GrammarMatcher
from codemask.engine import native, parser
from codemask.engine.automaton import RTN, build_rtn
from codemask.engine.automaton import _rule_calls as python_rule_calls
from codemask.engine.bitmask import bitmask_width, pack_ids, set_bits
from codemask.engine.compiler import CompiledGrammar
from codemask.engine.indentation import IndentingParser, SymbolParser
from codemask.engine.lexer import LexerCore, LexParserCore
from codemask.engine.lexer_masks import (
    LexerMaskComputer,
    Residuals,
    UncertainTokens,
    _residuals_numpy,
    _walk_native,
    _walk_numpy,
)
from codemask.engine.parser import ParserCore
from codemask.engine.position_classifier import PositionClassifier
from codemask.engine.position_masks import LazyPositionMasks
from codemask.engine.shared_positions import SharedPositions
from codemask.engine.token_trie import TokenTrie, expand_ranges, token_trie
from codemask.engine.uncertain import Uncertain
from codemask.errors import GrammarError
from codemask.grammar import ir
from codemask.grammar.optimize import optimize
from tests.data_paths import TEST_DATA
from tests.engine.conftest import compiler, encode, vocabulary

BENCH = TEST_DATA / "jsonschemabench"
PYTHON_FUNCTION = Path(__file__).resolve().parents[2] / "grammars" / "python_function.ebnf"
CODE = Path(__file__).resolve().parents[1] / "data" / "code"


def test_the_extension_is_built_and_used_by_default() -> None:
    assert native.available(), "codemask.engine._native was not built: `pip install -e .` needs a C compiler"
    assert native.enabled()


def grammar_of(source: str) -> Grammar:
    """A builtin grammar, ``python_function`` (EBNF) or a schema of the jsonschemabench sample by file name
    (generation mode: the grammar a server compiles per request)."""
    if source == "python_function":
        return Grammar.from_ebnf(PYTHON_FUNCTION.read_text())
    if source.endswith(".json"):
        return Grammar.from_json_schema(json.loads((BENCH / source).read_text())["schema"])
    return Grammar.builtin(source)


def classify_all(grammar: Grammar, tokenizer: str, use_native: bool) -> tuple[np.ndarray, list[Uncertain | None]]:
    compiled = compiler(tokenizer).compile(grammar)
    core = ParserCore(compiled.artifacts.rtn)  # fresh: no transition known yet
    positions = np.flatnonzero(compiled.artifacts.rtn.scanning)
    with native.using(use_native):
        classifier = PositionClassifier(core, token_trie(compiled.vocab), compiled.vocab_size, share=False)
        return classifier.classify(positions)


def uncertain_pairs(trie: TokenTrie, unc: Uncertain | None) -> set[tuple[int, bytes]]:
    if unc is None:
        return set()
    out = set()
    for token, r in zip(unc.token_ids.tolist(), unc.residual_of.tolist(), strict=True):
        start = int(unc.residual_starts[r])
        out.add((token, bytes(trie.matrix[unc.residual_rows[r], start : start + int(unc.residual_len[r])])))
    return out


@pytest.mark.parametrize(("source", "tokenizer"), [
    ("json", "gemma3"),
    ("Github_medium---o10297.json", "llama3"),
    ("Kubernetes---kb_474_Normalized.json", "qwen3"),
    ("python_function", "llama3"),
])
def test_c_walk_classifies_every_position_as_the_numpy_walk(source: str, tokenizer: str) -> None:
    grammar = grammar_of(source)
    c_accepted, c_uncertain = classify_all(grammar, tokenizer, use_native=True)
    np_accepted, np_uncertain = classify_all(grammar, tokenizer, use_native=False)
    assert (c_accepted == np_accepted).all()
    trie = token_trie(vocabulary(tokenizer))
    assert sum(u is not None for u in c_uncertain) > 0  # the grammar has positions that leave their frame
    for a, b in zip(c_uncertain, np_uncertain, strict=True):
        assert uncertain_pairs(trie, a) == uncertain_pairs(trie, b)


def test_a_spelled_key_is_followed_in_the_rtn_without_a_parser_state_per_byte() -> None:
    """A member's spelled key is a chain of RTN states that call nothing: the C walk follows the RTN
    along it rather than interning a parser state per byte (a key mask's positions used to make one
    per level of the trie along each key), and the mask after ``{"`` is what the Python walk gives."""
    keys = ["description", "descriptions", "identifier", "information"]
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in keys}, "additionalProperties": False}
    masks = []
    for use_native in (True, False):
        with native.using(use_native):
            compiled = compiler("llama3").compile(Grammar.from_json_schema(schema, mode="validate"))
            matcher = GrammarMatcher(compiled)
            assert matcher.accept_string('{"')
            masks.append(matcher.next_token_bitmask().copy())
            positions = compiled.generation()[1].masks.core
            if use_native:  # (the frame states of the keys' first bytes, their first bytes' targets)
                assert positions.num_states < len("description")
    assert (masks[0] == masks[1]).all()
    vocab = vocabulary("llama3")
    allowed = {t for t in range(vocab.vocab_size) if masks[0][t >> 5] >> (t & 31) & 1}
    spelled = {t for t in allowed if vocab.token_bytes[t] in (b"description", b"identifier", b"information")}
    assert spelled and all(vocab.token_bytes[t][:1] in (b"d", b"i") for t in allowed)


# Schemas whose masks lean on each part of the C walk: free strings and keys (bulk subtrees), open
# objects in validate mode (key complements: the walk memo), bounded strings (chains of states;
# counting rules past 32 characters, whose inner positions are too wide to list their uncertain
# tokens), enums, numbers, arrays, and the generation mode's ordered keys.
BOUNDED = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 300}, "code": {"type": "string", "minLength": 3, "maxLength": 12},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 40}}, "count": {"type": "integer"}},
    "required": ["title"]}
BOUNDED_INSTANCES = [
    {"title": "A fairly long title that crosses several blocks of sixty-four characters of a counted string, "
              "then some more words, and again a few more, so that its leaf rule is left and entered again",
     "code": "ab-12", "tags": ["short", "a tag of some thirty characters", "x"], "count": -42},
    {"title": "Ünïcödé tïtle – with dashes — and “quotes” and \\ backslashes \"inside\"", "extra": {"k": [1, 2.5]}},
    {"title": "", "code": "abc", "tags": []},
]


def schema_cases() -> list[tuple[str, Any, str, list[Any]]]:
    cases: list[tuple[str, Any, str, list[Any]]] = [("bounded", BOUNDED, "validate", BOUNDED_INSTANCES)]
    for name, mode in (("Github_medium---o82351.json", "validate"), ("Snowplow---sp_267_Normalized.json", "validate"),
                       ("Kubernetes---kb_986_Normalized.json", "validate"), ("Kubernetes---kb_474_Normalized.json",
                                                                              "generate")):
        doc = json.loads((BENCH / name).read_text())
        instances = [t["data"] for t in doc["tests"] if t["valid"]]
        cases.append((name, doc["schema"], mode, instances))
    return cases


def masks_of(schema: Any, mode: str, instances: list[Any], use_native: bool) -> tuple[np.ndarray, CompiledGrammar]:
    """Every mask along every instance (compact and indented), the positions classified from scratch."""
    SharedPositions.of(token_trie(vocabulary("llama3"))).clear()
    rows = []
    with native.using(use_native):
        compiled = GrammarCompiler(vocabulary("llama3"), cache_dir=False, progress=False).compile(
            Grammar.from_json_schema(schema, mode=mode))
        for instance in instances:
            compact = json.dumps(instance, separators=(",", ":"), ensure_ascii=False)
            for text in (compact, json.dumps(instance, indent=1)):
                matcher = GrammarMatcher(compiled)
                for token in [*encode("llama3", text), None]:
                    rows.append(matcher.next_token_bitmask().copy())
                    if token is not None and not matcher.accept_token(token):
                        break  # (generation mode: an instance may leave its language; the masks so far count)
    return np.stack(rows), compiled


def test_masks_from_c_walks_equal_the_numpy_walks_along_real_instances() -> None:
    """End to end: the masks of matchers along real instances, the positions classified by the C
    walk (with its memo read across the grammars, bulk subtrees and unlisted wide positions) and
    by the numpy walk."""
    walker = native.position_walker(token_trie(vocabulary("llama3")), vocabulary("llama3").vocab_size)
    walker.clear_memo()
    shared_hits = walker.memo_shared_hits
    unlisted = 0
    for name, schema, mode, instances in schema_cases():
        c_masks, compiled = masks_of(schema, mode, instances, True)
        np_masks, _ = masks_of(schema, mode, instances, False)
        assert c_masks.shape == np_masks.shape and (c_masks == np_masks).all(), name
        table = compiled.masks.masks
        assert isinstance(table, LazyPositionMasks)
        unlisted += sum(1 for row in range(table.num_classified) if (u := table.uncertain_of(row)) and u.direct)
    assert walker.memo_entries > 0 and walker.memo_shared_hits > shared_hits and unlisted > 0  # every path taken


def key_position_mask(schema: Any) -> np.ndarray:
    """The mask after ``{"`` of a schema's object (validating: a key, known or not), compiled anew."""
    fresh = GrammarCompiler(vocabulary("llama3"), cache_dir=False, progress=False, precompute=False)
    matcher = GrammarMatcher(fresh.compile(Grammar.from_json_schema(schema, mode="validate")))
    for token in encode("llama3", '{"'):
        assert matcher.accept_token(token)
    return matcher.next_token_bitmask().copy()


def key_masks_after(first: Any, second: Any) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The mask after ``{"`` of ``second`` walked with an empty memo, and walked after ``first``'s,
    with the memo entries and the reads of another core's entries that ``second`` added then; the
    numpy walk gives the same mask."""
    walker = native.position_walker(token_trie(vocabulary("llama3")), vocabulary("llama3").vocab_size)
    shared = SharedPositions.of(token_trie(vocabulary("llama3")))
    shared.clear()
    walker.clear_memo()
    alone = key_position_mask(second)
    shared.clear()
    walker.clear_memo()
    key_position_mask(first)
    entries, hits = walker.memo_entries, walker.memo_shared_hits
    shared.clear()
    after_first = key_position_mask(second)
    added, read = walker.memo_entries - entries, walker.memo_shared_hits - hits
    with native.using(False):
        shared.clear()
        assert (key_position_mask(second) == alone).all()
    return alone, after_first, added, read


def test_a_key_walk_reads_the_free_string_walk_another_schema_made() -> None:
    """Past the first byte that leaves every known key, a key complement is any string: its walk
    is kept by the shape of that state and read by the next schema, whose keys differ, with the
    mask it would have walked alone."""
    first = {"type": "object", "properties": {"shape": {"type": "string"}, "dimensions": {"type": "object"}}}
    second = {"type": "object", "properties": {"alpha": {"type": "integer"}, "beta": {"type": "boolean"}}}
    alone, after_first, _, read = key_masks_after(first, second)
    assert read > 0 and (after_first == alone).all()
    allowed = set(np.flatnonzero(np.unpackbits(alone.view(np.uint8), bitorder="little")).tolist())
    assert set(encode("llama3", "alpha")) <= allowed and set(encode("llama3", "zeta")) <= allowed


def test_the_letters_of_known_keys_are_walked_once_for_schemas_that_share_them() -> None:
    """Below a first byte that begins one of an open object's keys (the spelling goes on, any other
    letter leaves it for the free string), and below a UTF-8 lead byte, the key complement leads to
    free text: those walks too are kept by shape, so a second schema with the same key names and
    other values makes no memo entry of its own, and gets the mask it would have walked alone."""
    first = {"type": "object", "properties": {"content": {"type": "string"}, "status": {"type": "integer"}}}
    second = {"type": "object", "properties": {"content": {"type": "array"}, "status": {"type": "boolean"}}}
    alone, after_first, added, read = key_masks_after(first, second)
    assert added == 0 and read >= 3 and (after_first == alone).all()
    allowed = set(np.flatnonzero(np.unpackbits(alone.view(np.uint8), bitorder="little")).tolist())
    assert set(encode("llama3", "content")) <= allowed and set(encode("llama3", "contour")) <= allowed


def test_a_states_shape_is_worked_out_once_per_core() -> None:
    """Inside an open object's key, after a known key's first letters, the letters that leave the
    known keys lead to the same free-string state as at the key's start: its shape, worked out at
    ``{"``, is not worked out again for the masks after ``{"con`` and ``{"cont``, which are the
    masks the core walks alone."""
    walker = native.position_walker(token_trie(vocabulary("llama3")), vocabulary("llama3").vocab_size)
    schema = {"type": "object", "properties": {"content": {"type": "string"}, "contour": {"type": "integer"}}}
    fresh = GrammarCompiler(vocabulary("llama3"), cache_dir=False, progress=False, precompute=False)
    SharedPositions.of(token_trie(vocabulary("llama3"))).clear()
    matcher = GrammarMatcher(fresh.compile(Grammar.from_json_schema(schema, mode="validate")))
    masks, shapes = [], []
    for text in ('{"', "con", "t"):
        for token in encode("llama3", text):
            assert matcher.accept_token(token)
        before = walker.memo_shapes
        masks.append(matcher.next_token_bitmask().copy())
        shapes.append(walker.memo_shapes - before)
    assert shapes[0] > 0 and shapes[1:] == [0, 0]
    with native.using(False):
        SharedPositions.of(token_trie(vocabulary("llama3"))).clear()
        alone = GrammarMatcher(fresh.compile(Grammar.from_json_schema(schema, mode="validate")))
        for text, mask in zip(('{"', "con", "t"), masks, strict=True):
            for token in encode("llama3", text):
                assert alone.accept_token(token)
            assert (alone.next_token_bitmask() == mask).all()


@pytest.mark.parametrize("source", ["json", "python_function", "Kubernetes---kb_474_Normalized.json",
                                    "Github_medium---o10297.json"])
def test_c_follow_bytes_equal_the_python_worklist(source: str) -> None:
    """With the states' symbols made with the rule automata (`RTN.first_bytes`) and without them
    (read from the table's rows, as for a grammar from the disk cache)."""
    ir = optimize(grammar_of(source).ir)
    rtn = build_rtn({name: rule.body for name, rule in ir.rules.items()}, ir.start,
                    shared=frozenset(name for name, rule in ir.rules.items() if rule.shared))
    assert rtn.first_bytes is not None and rtn.first_bytes.shape == (rtn.num_states, 4)
    with native.using(False):
        expected = rtn.follow_bytes()
    assert (native.follow_bytes(rtn) == expected).all() and expected.any()
    from_rows = dataclasses.replace(rtn)
    assert from_rows.first_bytes is None
    assert (native.follow_bytes(from_rows) == expected).all()


@pytest.mark.parametrize("source", ["json", "python_function", "Kubernetes---kb_474_Normalized.json",
                                    "Github_medium---o10297.json"])
@pytest.mark.parametrize("limit", [0, 48, 10**9])
def test_c_rule_graph_equals_the_python_search(source: str, limit: int) -> None:
    rtn = compiler("llama3").compile(grammar_of(source)).artifacts.rtn
    with native.using(False):
        expected = rtn.rule_calls(limit)
    found = rtn.rule_calls(limit)
    for name, want, got in zip(expected._fields, expected, found, strict=True):
        assert got.dtype == want.dtype and (got == want).all(), name
    assert len(expected.callees) and expected.with_callers.any()
    if limit == 0:  # (every rule has a state)
        assert expected.unshared.all()
    elif source != "json":  # (every rule of the builtin JSON grammar is recursive; the others have shared ones)
        assert not expected.unshared.all()


def test_rule_graph_marks_recursion_the_rules_that_reach_it_and_large_call_trees() -> None:
    # 0 -> 1 -> 2 -> 1 (a cycle), 3 -> 4 twice, 5 -> 4 (4 called in tail position only, by 3 and 5)
    owner = np.array([0, 1, 2, 3, 3, 5], dtype=np.int32)
    callee = np.array([1, 2, 1, 4, 4, 4], dtype=np.int32)
    tail = np.array([0, 0, 0, 1, 1, 1], dtype=bool)
    sizes = np.array([1, 1, 1, 2, 5, 1], dtype=np.int32)
    for limit, large in ((10, set()), (6, {3}), (4, {3, 4, 5})):  # 3 with 4: 7 states, 5 with 4: 6
        lo, callees, unshared, with_callers = native.rule_graph(owner, callee, tail, sizes, limit)
        assert [callees[lo[r]:lo[r + 1]].tolist() for r in range(6)] == [[1], [2], [1], [4], [], [4]]
        assert set(np.flatnonzero(unshared).tolist()) == {0, 1, 2} | large
        assert set(np.flatnonzero(with_callers).tolist()) == {1, 2}  # 4 only ever ends its callers' frames
    rng = np.random.default_rng(7)
    for rules, most_calls in [(40, 120)] * 50 + [(3, 2000)] * 5:  # (the last: rules of a thousand calls each)
        rules, calls = int(rng.integers(1, rules)), int(rng.integers(0, most_calls))
        owner, callee = (rng.integers(0, rules, calls).astype(np.int32) for _ in range(2))
        tail, sizes = rng.random(calls) < 0.3, rng.integers(1, 30, rules).astype(np.int32)
        limit = int(rng.integers(0, 200))
        want = python_rule_calls(owner, callee, tail, sizes, limit)
        got = native.rule_graph(owner, callee, tail, sizes, limit)
        assert all((a == b).all() for a, b in zip(got, want, strict=True))
    with pytest.raises(ValueError, match="out of range"):
        native.rule_graph(np.array([9], dtype=np.int32), np.array([0], dtype=np.int32), np.zeros(1, dtype=bool),
                          sizes[:2], 10)
    with pytest.raises(ValueError, match=r"expected \d+ bytes, got \d+"):
        native.rule_graph(owner, callee[:-1], tail, sizes, 10)


def test_flat_trie_is_the_levels_laid_end_to_end() -> None:
    trie = token_trie(vocabulary("llama3"))
    flat = trie.flat
    for depth, level in enumerate(trie.levels):
        at = slice(int(flat.offsets[depth]), int(flat.offsets[depth + 1]))
        assert (flat.byte[at] == level.byte).all() and (flat.token[at] == level.token).all()
        assert (flat.lo[at] == level.lo).all() and (flat.hi[at] == level.hi).all()
        assert (flat.depth[at] == depth + 1).all()
        if depth + 1 < len(trie.levels):
            children = trie.levels[depth + 1]
            rng = np.random.default_rng(depth)
            for node in rng.choice(len(level.byte), size=min(200, len(level.byte)), replace=False).tolist():
                kids = np.arange(flat.child_lo[at][node], flat.child_hi[at][node]) - flat.offsets[depth + 1]
                assert (children.parent[kids] == node).all()
                assert len(kids) == int((children.parent == node).sum())


def test_bad_arguments_raise_instead_of_reading_out_of_bounds() -> None:
    compiled = compiler("llama3").compile(Grammar.builtin("json"))
    core = ParserCore(compiled.artifacts.rtn)
    flat = token_trie(compiled.vocab).flat
    one = np.zeros(1, dtype=np.int32)
    with pytest.raises(ValueError, match="parser state out of range"):
        native.walk(core, flat, one, np.array([10**6], dtype=np.int32), one)
    with pytest.raises(ValueError, match="trie node out of range"):
        native.walk(core, flat, np.array([len(flat.byte)], dtype=np.int32), one, one)
    from codemask.engine import _native  # type: ignore[attr-defined]

    with pytest.raises(ValueError, match="flags"):
        _native.walk(core.table, core.alphabet, core.flags[:-1], core.has_stacks, flat.byte, flat.lo, flat.hi,
                     flat.token, flat.child_lo, flat.child_hi, flat.depth, one, one, one)


def drive(rtn: RTN, use_native: bool | None, limit: int, *, lists: bool = False, lazy: bool = False) -> ParserCore:
    """A fresh core put through a fixed sequence of operations: every reachable state's row filled
    breadth first (up to ``limit`` states), frame and exit states, vectorised and single steps, and
    closures of random nodes. ``use_native`` None alternates between C and Python from operation
    to operation (both read and intern the nodes in the C record, so mixing must change nothing);
    ``lists``: the core is made without the C interner, its nodes in Python lists, as where the
    extension was not built; ``lazy``: a core that leaves calls unexpanded (lexer mode)."""
    turns = iter(range(10**9))

    def native_now() -> bool:
        return bool(next(turns) % 2) if use_native is None else use_native

    with native.using(native_now()), mock.patch.object(native, "interner", return_value=None) if lists \
            else contextlib.nullcontext():
        core = ParserCore(rtn, lazy=lazy)
    assert (core._native is None) == lists
    frontier, i = [core.initial], 0
    while i < len(frontier) and len(frontier) < limit:
        with native.using(native_now()):
            core.fill_rows(np.array([frontier[i]]))
        known = set(frontier)
        frontier += [s for s in dict.fromkeys(core.table[frontier[i]].tolist()) if s >= 0 and s not in known]
        i += 1
    rng = np.random.default_rng(7)
    for position in np.flatnonzero(rtn.scanning)[:300].tolist():
        with native.using(native_now()):
            core.frame_state(position)
    for stack in rng.integers(0, len(core.node_state), 300).tolist():
        with native.using(native_now()):
            core.exit_state(stack)
    live = np.flatnonzero(core.has_stacks[: core.num_states])
    for _ in range(30):
        with native.using(native_now()):
            core.advance(rng.choice(live, 64), rng.integers(0, core.alphabet, 64))
            core.step(int(rng.choice(live)), int(rng.integers(0, core.alphabet)))
            core.closure(rng.integers(0, len(core.node_state), int(rng.integers(1, 4))).tolist())
    return core


def assert_same_core(a: ParserCore, b: ParserCore) -> None:
    n = b.num_states
    assert a.num_states == n
    assert len(a.node_state) == len(b.node_state) == len(a.node_parents)
    assert list(a.node_state) == list(b.node_state)
    assert list(a.node_parents) == list(b.node_parents)  # tuples: their order (which orders later pops) agrees too
    assert all(list(p) == sorted(set(p)) for p in a.node_parents)
    assert a.state_stacks == b.state_stacks and a.state_flag == b.state_flag
    assert (a.table[:n] == b.table[:n]).all()
    assert (a.flags[:n] == b.flags[:n]).all() and (a.has_stacks[:n] == b.has_stacks[:n]).all()


@pytest.mark.parametrize(("source", "limit", "lazy"), [
    ("json", 3000, False),
    ("python_function", 3000, False),
    ("Github_medium---o10297.json", 3000, False),
    ("Kubernetes---kb_474_Normalized.json", 3000, False),
    ("sql", 1500, False),  # lexer mode: the parser's symbols are terminals
    ("sql", 1500, True),  # ... and the calls left unexpanded, as lexer mode does
    ("python", 1500, True),
])
def test_c_closures_intern_the_same_nodes_and_states_as_python(source: str, limit: int, lazy: bool) -> None:
    rtn = compiler("llama3").compile(grammar_of(source)).artifacts.rtn
    python = drive(rtn, False, limit, lists=True, lazy=lazy)
    assert python.num_states >= 1000
    assert_same_core(drive(rtn, True, limit, lazy=lazy), python)
    assert_same_core(drive(rtn, False, limit, lazy=lazy), python)
    assert_same_core(drive(rtn, None, limit, lazy=lazy), python)


def test_a_too_ambiguous_closure_raises_in_c_as_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    rtn = compiler("llama3").compile(Grammar.builtin("json")).artifacts.rtn
    monkeypatch.setattr(parser, "MAX_STACKS", 3)
    for use_native in (True, False):
        with native.using(use_native), pytest.raises(GrammarError, match="exceeds 3 stack nodes"):
            ParserCore(rtn)


def test_bad_closure_arguments_raise_instead_of_reading_out_of_bounds() -> None:
    core = ParserCore(compiler("llama3").compile(Grammar.builtin("json")).artifacts.rtn)
    assert core._native is not None
    with pytest.raises(IndexError, match="stack node out of range"):
        core._native.closure(core, [len(core.node_state)])
    with pytest.raises(IndexError, match="id out of range"):
        core._native.closure(core, [-1])
    with pytest.raises(IndexError, match="parser state out of range"):
        core._native.fill_rows(core, [core.num_states])
    with pytest.raises(IndexError, match="stack node out of range"):
        core.node(0, (len(core.node_state),))
    with pytest.raises(ValueError, match="sorted, without repeats"):
        core.node(0, (1, 0))
    with pytest.raises(IndexError, match="RTN state out of range"):
        core.node(len(core.rtn.accepting), ())
    assert core.node(0, (0, 1)) == core.node(0, (0, 1)) == len(core.node_state) - 1  # interned once
    from codemask.engine import _native  # type: ignore[attr-defined]

    rtn = core.rtn
    states, words = len(rtn.accepting), (rtn.trans.shape[1] + 63) // 64
    lazy = (True, np.zeros(states, np.uint8), np.zeros(states, np.uint8), np.zeros((states, words), np.uint64))
    with pytest.raises(ValueError, match="accepting"):
        _native.Interner(rtn.trans, rtn.trans.shape[1], rtn.scanning, rtn.accepting[:-1], np.zeros(1, np.int32),
                         np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.uint8), [], [], 10, *lazy)
    with pytest.raises(ValueError, match="first"):
        _native.Interner(rtn.trans, rtn.trans.shape[1], rtn.scanning, rtn.accepting, np.zeros(states + 1, np.int32),
                         np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.uint8), [], [], 10,
                         *lazy[:3], np.zeros((states, words + 1), np.uint64))
    calls = np.zeros(len(rtn.accepting) + 1, np.int32)
    calls[1:] = 1
    with pytest.raises(ValueError, match="out of range"):
        _native.Interner(rtn.trans, rtn.trans.shape[1], rtn.scanning, rtn.accepting, calls,
                         np.array([len(rtn.accepting)], np.int32), np.zeros(1, np.int32), np.zeros(1, np.uint8),
                         [], [], 10, *lazy)
    for where, value in (((0, 0), states), ((-1, -1), -2), ((states // 2, 7), np.iinfo(np.int32).min)):
        bad_trans = rtn.trans.copy()
        bad_trans[where] = value
        with pytest.raises(ValueError, match="trans: a transition to an RTN state out of range"):
            _native.Interner(bad_trans, rtn.trans.shape[1], rtn.scanning, rtn.accepting,
                             np.zeros(states + 1, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32),
                             np.zeros(0, np.uint8), [], [], 10, *lazy)
    with pytest.raises(ValueError, match="trans: a transition to an RTN state out of range"):
        ParserCore(dataclasses.replace(rtn, trans=bad_trans), like=core)  # (another automaton: checked anew)
    twin = ParserCore(rtn, like=core)  # (the same one: its check is not repeated)
    assert twin.state_stacks[twin.initial] == core.state_stacks[core.initial]
    with pytest.raises(ValueError, match="empty lists"):
        _native.Interner(rtn.trans, rtn.trans.shape[1], rtn.scanning, rtn.accepting, np.zeros(states + 1, np.int32),
                         np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.uint8), [(0,)], [False], 10,
                         *lazy)
    with pytest.raises(IndexError, match="sorted node ids"):
        core._native.intern(core, (1, 0), False)
    with pytest.raises(IndexError, match="sorted node ids"):
        core._native.intern(core, (len(core.node_state),), False)
    assert core._native.intern(core, core.state_stacks[core.initial], core.state_flag[core.initial]) == core.initial
    lazy_core = ParserCore(rtn, lazy=True)
    assert lazy_core._native is not None
    with pytest.raises(ValueError, match="no rows to fill"):
        lazy_core._native.fill_rows(lazy_core, [lazy_core.initial])
    lazy_core.fill_rows(np.array([lazy_core.initial]))  # through steps instead
    assert (lazy_core.table[lazy_core.initial] != parser.UNKNOWN).all()
    with pytest.raises(IndexError, match="parser state out of range"):
        core._native.step(core, core.num_states, 0)
    with pytest.raises(IndexError, match="symbol out of range"):
        core._native.step(core, core.initial, core.alphabet)
    with pytest.raises(IndexError, match="stack node out of range"):
        core.node_state[len(core.node_state)]
    with pytest.raises(IndexError, match="stack node out of range"):
        core.node_parents[-1]


REAL_SOURCES = {"python": Path(textwrap.__file__), "sql": CODE / "sql" / "analytics.sql",
                "go": CODE / "go" / "shapes.go", "javascript": CODE / "javascript" / "dom_widgets.js"}


def met_candidate_sets(language: str, tokens: int) -> tuple[LexParserCore, list[tuple[frozenset[int], frozenset[int]]]]:
    """The builtin grammar's lexer-mode core after the first ``tokens`` SmolLM2 tokens of a real
    file (with their masks), and the (candidates, blockers) sets its parser states met, sorted."""
    compiled = compiler("smollm2").compile(Grammar.builtin(language))
    core = compiled.core
    assert isinstance(core, LexParserCore)
    matcher = GrammarMatcher(compiled)
    for token in encode("smollm2", REAL_SOURCES[language].read_text(encoding="utf-8"))[:tokens]:
        matcher.next_token_bitmask()
        if not matcher.accept_token(token):
            break
    starts = sorted(set(core._by_allowed.values()), key=lambda cb: (sorted(cb[0]), sorted(cb[1])))
    assert len(starts) >= 3
    return core, starts


def per_row(lexer: LexerCore, walk: tuple[np.ndarray, ...]) -> tuple[list[int], dict[int, tuple[int, object]]]:
    """A trie walk's accepted rows, and per exiting row the depth and end class (by its name) of
    the last match above it."""
    accepted, lo, hi, depth, end_class = walk
    exits = {}
    for a, b, d, c in zip(lo.tolist(), hi.tolist(), depth.tolist(), end_class.tolist(), strict=True):
        for row in range(a, b):
            exits[row] = (d, lexer.end_classes[c] if c >= 0 else None)
    return accepted.tolist(), exits


@pytest.mark.parametrize("language", ["python", "sql", "go"])
def test_c_lexer_walk_classifies_as_the_numpy_walk(language: str) -> None:
    """From the candidate sets a real file meets (and a few bytes into a lexeme), two fresh lexer
    cores — one walked in C, computing the transitions it meets in C, one in numpy with the Python
    transitions — classify every token alike; the C walk grows its core's arrays on the way."""
    core, starts = met_candidate_sets(language, 120)
    trie = token_trie(vocabulary("smollm2"))
    lexers = [LexerCore(core.lexer.automata) for _ in range(2)]
    compared = 0
    for candidates, blockers in starts:
        for prefix in (b"", b"s", b"se", b"1", b" ", b"'"):
            with native.using(False):
                states = [lexer.walk(lexer.start(candidates, blockers), prefix) for lexer in lexers]
            # the C walk computes transitions depth first, numpy level by level: new states are
            # numbered in another order, so states and end classes are compared by their keys
            keys = [lexer.keys[s] if s >= 0 else None for lexer, s in zip(lexers, states, strict=True)]
            assert keys[0] == keys[1]
            if states[0] < 0 or lexers[0].poisoned[states[0]]:
                continue
            c_walk = per_row(lexers[0], _walk_native(lexers[0], trie, states[0]))
            with native.using(False):
                np_walk = per_row(lexers[1], _walk_numpy(lexers[1], trie, states[1]))
            assert c_walk == np_walk
            compared += 1
    assert compared >= 3 * len(starts)
    assert len(lexers[0].keys) > 2 * 64  # the arrays began with 64 rows: the walk re-read them as they grew


def explore_lexer(lexer: LexerCore, starts: list[tuple[frozenset[int], frozenset[int]]], use_native: bool,
                  limit: int) -> None:
    """Every byte's transition from the start states, breadth first, until ``limit`` states."""
    with native.using(use_native):
        todo = [lexer.start(candidates, blockers) for candidates, blockers in starts]
        done: set[int] = set()
        while todo and len(done) < limit:
            state = todo.pop(0)
            if state in done or lexer.poisoned[state]:
                continue
            done.add(state)
            for byte in range(256):
                nxt = lexer.step(state, byte)
                if nxt >= 0 and nxt not in done:
                    todo.append(nxt)


@pytest.mark.parametrize("language", ["python", "sql", "javascript"])
def test_c_lexer_transitions_intern_the_same_states_as_python(language: str) -> None:
    """From the candidate sets of a real file's parser states, every byte from the first 300 lexer
    states reached: the C transitions and the Python ones intern the same keys, in the same order,
    and make the same tables (Python's indentation, reserved words and blockers; SQL's and
    JavaScript's retyped keywords)."""
    core, starts = met_candidate_sets(language, 150)
    lexers = [LexerCore(core.lexer.automata) for _ in range(2)]
    assert lexers[0]._native is not None
    explore_lexer(lexers[0], starts, True, 300)
    explore_lexer(lexers[1], starts, False, 300)
    assert lexers[0].keys == lexers[1].keys
    assert len(lexers[0].keys) > 300
    count = len(lexers[0].keys)
    assert (lexers[0].table[:count] == lexers[1].table[:count]).all()
    assert lexers[0].poisoned[:count].tolist() == lexers[1].poisoned[:count].tolist()
    if language == "python":  # the newline lexeme's measured indentation is part of the keys
        assert any(key[5] not in (None, (0, 0)) for key in lexers[0].keys)
        assert lexers[0].poisoned[:count].sum() == 1 and (lexers[0].table[:count] == lexers[0].poison).any()


def test_bad_lexer_transition_arguments_raise() -> None:
    lexer = LexerCore(compiler("smollm2").compile(Grammar.builtin("sql")).core.lexer.automata)
    assert lexer._native is not None
    with pytest.raises(IndexError, match="lexer state out of range"):
        lexer._native.compute(lexer, len(lexer.keys), 0x61)
    with pytest.raises(IndexError, match="byte out of range"):
        lexer._native.compute(lexer, 0, 256)
    lexer.keys.append(((10**7,), (), -1, False, True, None, ()))
    with pytest.raises(ValueError, match="automaton state out of range"):
        lexer._native.compute(lexer, len(lexer.keys) - 1, 0x61)


def same_groups(lexers: list[LexerCore], a: list[tuple[int, np.ndarray]], b: list[tuple[int, np.ndarray]]) -> bool:
    """The same end classes (by what they are: two lexers number them in the order they met
    them) with the same members."""
    return {lexers[0].end_classes[cls]: members.tolist() for cls, members in a} == \
        {lexers[1].end_classes[cls]: members.tolist() for cls, members in b}


@pytest.mark.parametrize("language", ["python", "sql"])
def test_c_residual_walk_splits_as_the_numpy_walk(language: str) -> None:
    """The tails of every vocabulary token (after its first 1, 2 and 3 bytes), walked from the fresh
    lexer states a real file meets by two fresh lexer cores — one in C, one in numpy — survive, die
    and end their first lexeme alike."""
    core, starts = met_candidate_sets(language, 80)
    starts = starts[:6]
    trie = token_trie(vocabulary("smollm2"))
    lexers = [LexerCore(core.lexer.automata) for _ in range(2)]
    ended = 0
    for candidates, blockers in starts:
        lids = [lexer.start(candidates, blockers) for lexer in lexers]
        for skip in (1, 2, 3):
            rows = np.flatnonzero(trie.lengths > skip)
            offsets = np.full(len(rows), skip, dtype=np.int64)
            lengths = trie.lengths[rows].astype(np.int64) - skip
            c_alive, c_end, c_class, c_ended = native.lexer_residuals(lexers[0], trie.matrix, rows, offsets, lengths,
                                                                      lids[0])
            with native.using(False):
                n_alive, n_end, n_class, n_ended = _residuals_numpy(lexers[1], trie.matrix, rows, offsets, lengths,
                                                                    lids[1])
            assert (c_alive == n_alive).all() and (c_end == n_end).all() and same_groups(lexers, c_ended, n_ended)
            names = [[lexer.end_classes[c] if c >= 0 else None for c in classes.tolist()]
                     for lexer, classes in zip(lexers, (c_class, n_class), strict=True)]
            assert names[0] == names[1]
            ended += int(((c_end > 0) & ~c_alive).sum())
    assert ended > 500  # many tails end their first lexeme inside


@pytest.mark.parametrize("language", ["python", "sql"])
def test_c_residual_walk_follows_looping_lexemes_as_the_numpy_walk(language: str) -> None:
    """With some end classes looping (their lexeme is followed by another from the same lexer
    state, as `LexerMaskComputer` asks for the lexemes that leave the parser state unchanged),
    the C and numpy residual walks agree on every tail of the vocabulary, and the loops take
    tails through several lexemes in one walk."""
    core, starts = met_candidate_sets(language, 80)
    trie = token_trie(vocabulary("smollm2"))
    lexers = [LexerCore(core.lexer.automata) for _ in range(2)]
    names = core.lexer.automata.names
    looping_terminals = {t for t, name in enumerate(names) if name in ("MINUS", "PLUS", "TILDE", "LPAR")}
    looping_terminals |= set(core.lexer.automata.ignore)
    rows = np.flatnonzero(trie.lengths > 1)
    offsets = np.ones(len(rows), dtype=np.int64)
    lengths = trie.lengths[rows].astype(np.int64) - 1
    followed = 0
    for candidates, blockers in starts[:6]:
        lids = [lexer.start(candidates, blockers) for lexer in lexers]
        plain = native.lexer_residuals(lexers[0], trie.matrix, rows, offsets, lengths, lids[0])
        while True:  # a walk may meet end classes its lexer had not interned yet: until neither does
            interned = [len(lexer.end_classes) for lexer in lexers]
            loops = [frozenset(c for c, end in enumerate(lexer.end_classes) if end[0] in looping_terminals)
                     for lexer in lexers]
            c_alive, c_end, c_class, c_ended = native.lexer_residuals(lexers[0], trie.matrix, rows, offsets, lengths,
                                                                      lids[0], loops[0])
            with native.using(False):
                n_alive, n_end, n_class, n_ended = _residuals_numpy(lexers[1], trie.matrix, rows, offsets, lengths,
                                                                    lids[1], loops[1])
            if [len(lexer.end_classes) for lexer in lexers] == interned:
                break
        assert (c_alive == n_alive).all() and (c_end == n_end).all() and same_groups(lexers, c_ended, n_ended)
        assert [lexers[0].end_classes[c] if c >= 0 else None for c in c_class.tolist()] == \
            [lexers[1].end_classes[c] if c >= 0 else None for c in n_class.tolist()]
        followed += int((c_end > plain[1]).sum() + (c_alive & ~plain[0]).sum())
    assert followed > 50  # tails that went on past a looping lexeme


@pytest.mark.parametrize("order", ["trie rows", "shuffled"])
def test_c_residual_walk_agrees_with_numpy_on_tails_of_mixed_offsets(order: str) -> None:
    """Tails that start 1 to 4 bytes into their tokens, in trie-row order (neighbours share
    prefixes, as in a real set) or shuffled, with and without looping end classes: the C walk
    agrees with numpy's, which walks them one byte of each per round."""
    core, starts = met_candidate_sets("python", 80)
    trie = token_trie(vocabulary("smollm2"))
    lexers = [LexerCore(core.lexer.automata) for _ in range(2)]
    rng = np.random.default_rng(7)
    rows = np.flatnonzero(trie.lengths > 1)
    offsets = np.minimum(rng.integers(1, 5, len(rows)), trie.lengths[rows] - 1).astype(np.int64)
    if order == "shuffled":
        shuffled = rng.permutation(len(rows))
        rows, offsets = rows[shuffled], offsets[shuffled]
    lengths = trie.lengths[rows].astype(np.int64) - offsets
    ignored = set(core.lexer.automata.ignore)
    for candidates, blockers in starts[:4]:
        lids = [lexer.start(candidates, blockers) for lexer in lexers]
        for looping in (False, True):
            while True:  # until neither walk meets an end class its lexer had not interned
                interned = [len(lexer.end_classes) for lexer in lexers]
                loops = [frozenset(c for c, end in enumerate(lexer.end_classes) if looping and end[0] in ignored)
                         for lexer in lexers]
                c_alive, c_end, c_class, c_ended = native.lexer_residuals(lexers[0], trie.matrix, rows, offsets,
                                                                          lengths, lids[0], loops[0])
                with native.using(False):
                    n_alive, n_end, n_class, n_ended = _residuals_numpy(lexers[1], trie.matrix, rows, offsets,
                                                                        lengths, lids[1], loops[1])
                if [len(lexer.end_classes) for lexer in lexers] == interned:
                    break
            assert (c_alive == n_alive).all() and (c_end == n_end).all() and same_groups(lexers, c_ended, n_ended)
            assert [lexers[0].end_classes[c] if c >= 0 else None for c in c_class.tolist()] == \
                [lexers[1].end_classes[c] if c >= 0 else None for c in n_class.tolist()]


def test_bad_lexer_walk_arguments_raise_instead_of_reading_out_of_bounds() -> None:
    compiled = compiler("smollm2").compile(Grammar.builtin("sql"))
    lexer = LexerCore(compiled.core.lexer.automata)
    trie = token_trie(compiled.vocab)
    pre = trie.preorder
    with pytest.raises(ValueError, match="lexer state out of range"):
        native.lexer_walk(lexer, pre, 10**6, -1, -1)
    matrix = trie.matrix
    lid = lexer.start(frozenset(range(len(lexer.automata.names))))
    with pytest.raises(ValueError, match="residual out of the matrix"):
        native.lexer_residuals(lexer, matrix, np.array([len(matrix)]), np.zeros(1), np.ones(1), lid)
    with pytest.raises(ValueError, match="residual out of the matrix"):
        native.lexer_residuals(lexer, matrix, np.zeros(1), np.array([matrix.shape[1]]), np.ones(1), lid)
    with pytest.raises(ValueError, match="lexer state out of range"):
        native.lexer_residuals(lexer, matrix, np.zeros(1), np.zeros(1), np.ones(1), 10**6)
    stepper = lexer.native_stepper()
    with pytest.raises(ValueError, match="trie array"):
        stepper.walk(lexer, pre.byte, pre.depth, pre.lo[:-1], pre.hi, pre.token, pre.end, lid, -1, -1)
    broken = pre.end.copy()
    broken[5] = 5  # a subtree that ends where it starts would scan forever
    with pytest.raises(ValueError, match="subtree end out of order"):
        stepper.walk(lexer, pre.byte, pre.depth, pre.lo, pre.hi, pre.token, broken, lid, -1, -1)
    assert not pre.end.flags.writeable and not pre.depth.flags.writeable  # (checked once by the C scan)
    stepper.walk(lexer, pre.byte, pre.depth, pre.lo, pre.hi, pre.token, pre.end, lid, -1, -1)  # checked, kept
    with pytest.raises(ValueError, match="subtree end out of order"):  # writable arrays: checked at every call
        stepper.walk(lexer, pre.byte, pre.depth, pre.lo, pre.hi, pre.token, broken, lid, -1, -1)
    deeper = pre.depth.copy()
    deeper[0] = 2  # a node below a level the scan has not entered: its state would be garbage
    with pytest.raises(ValueError, match="deeper than its parent"):
        stepper.walk(lexer, pre.byte, deeper, pre.lo, pre.hi, pre.token, pre.end, lid, -1, -1)
    lexer.end_class_of = lexer.end_class_of[:1]  # a core whose arrays do not cover its states
    with pytest.raises(ValueError, match=r"lexer\.end_class_of"):
        native.lexer_walk(lexer, pre, lid, -1, -1)


@pytest.mark.parametrize("accepted", [0.03, 0.5, 0.97])
@pytest.mark.parametrize("whole", [False, True])
def test_set_bits_where_in_c_sets_the_bits_set_bits_sets(accepted: float, whole: bool) -> None:
    """A group's tokens by residual, set where the residual is accepted: token by token, or (with
    the group's packed bits, when most are accepted) all less the refused; as numpy does."""
    rng = np.random.default_rng(3)
    vocab_size = 128_256
    token_ids = rng.choice(vocab_size, 5_000, replace=False).astype(np.int32)
    residual_of = rng.integers(0, 700, len(token_ids)).astype(np.int64)
    residuals = Residuals(np.zeros(700, dtype=np.int64), np.zeros(700, dtype=np.int64), np.zeros(700, dtype=np.int64),
                          np.arange(700), 0)
    group = UncertainTokens(token_ids, residuals, residual_of)
    ok = rng.random(700) < accepted
    start = rng.integers(0, 2**32, bitmask_width(vocab_size), dtype=np.uint64).astype(np.uint32)
    rows = [start.copy(), start.copy()]
    bits = pack_ids(token_ids, vocab_size).tobytes() if whole else b""
    native.set_bits_where(rows[0], group.by_residual, group.offsets, ok.astype(np.uint8).tobytes(), bits)
    set_bits(rows[1], token_ids[ok[residual_of]])
    assert (rows[0] == rows[1]).all() and (rows[0] != start).any()
    expected = np.unpackbits(start.view(np.uint8), bitorder="little").astype(bool)
    expected[token_ids[ok[residual_of]]] = True
    assert (np.unpackbits(rows[0].view(np.uint8), bitorder="little").astype(bool) == expected).all()
    with pytest.raises(IndexError, match="token out of range"):
        native.set_bits_where(start.copy(), (token_ids + vocab_size + 64).tobytes(), group.offsets, b"\x01" * 700, b"")
    with pytest.raises(TypeError, match="uint32"):
        native.set_bits_where(start.astype(np.uint64), group.by_residual, group.offsets, bytes(700), b"")
    with pytest.raises(IndexError, match="offsets out of range"):
        native.set_bits_where(start.copy(), group.by_residual, np.full(701, 9_999, np.int32).tobytes(), b"\x01" * 700,
                              b"")
    with pytest.raises(ValueError, match="0/1 bytes"):
        native.set_bits_where(start.copy(), group.by_residual, group.offsets, b"\x02" * 700, b"")
    with pytest.raises(ValueError, match="do not fit together"):
        native.set_bits_where(start.copy(), group.by_residual, group.offsets, bytes(699), b"")


def drive_combined(language: str, use_native: bool, data: bytes) -> tuple[LexParserCore, list[int]]:
    """A fresh lexer-mode core of the builtin grammar driven over ``data`` byte by byte (every
    lexeme end is an `after`, every new parser state a `fresh`), and in Python also over a line
    in a completion scope from the middle; returns it and the states it passed through."""
    compiled = compiler("smollm2").compile(Grammar.builtin(language))
    assert compiled.artifacts.terminals is not None
    with native.using(use_native):
        core = LexParserCore(ParserCore(compiled.artifacts.rtn, lazy=True), LexerCore(compiled.artifacts.terminals))
        states = [core.initial]
        for byte in data:
            states.append(core.step(states[-1], byte))
            assert states[-1] != parser.DEAD
        if language == "python":
            middle = states[len(states) // 2]
            core.walk(core.scoped(middle, "line"), data[len(states) // 2:][:60])
    return core, states


@pytest.mark.parametrize("language", ["python", "go", "javascript"])
def test_c_symbol_steps_intern_the_same_states_as_python(language: str) -> None:
    """`LexParserCore.after` and the fresh lexer states in C (`native.symbol_steps`, the common
    cases: parser steps, brackets and `def` marks under Python's indentation) against Python:
    driven over the same real file, two cores intern the same indentation, parser, lexer and
    combined states in the same order; then from every parser state interned (up to 400), every
    end class gives the same state in C and in Python, and so does the fresh lexer state."""
    data = REAL_SOURCES[language].read_bytes()[:12000]
    (core, states), (python_core, python_states) = (drive_combined(language, use, data) for use in (True, False))
    assert core.native_steps is not None
    assert states == python_states
    assert core.keys == python_core.keys and core.lexer.keys == python_core.lexer.keys
    assert core.parser.state_stacks == python_core.parser.state_stacks
    if language == "python":
        assert core.symbols.keys == python_core.symbols.keys  # type: ignore[attr-defined]
        assert any(key[5] is not None for key in core.symbols.keys)  # type: ignore[attr-defined]
    symbols = core.symbols
    pids = range(min(len(symbols.keys) if isinstance(symbols, IndentingParser) else core.parser.num_states, 400))
    ends = range(len(core.lexer.end_classes))
    assert len(pids) > 100 and len(ends) > 20
    steps = core.native_steps
    for pid in pids:
        for end_class in ends:
            assert steps.after(pid, end_class) == core._after(pid, end_class), (pid, core.lexer.end_classes[end_class])
        assert steps.fresh(pid) == core.fresh(pid)[1]
    kinds = {core.lexer.automata.names[terminal] for terminal, _column in core.lexer.end_classes}
    if language == "python":  # the tracker's cases C hands back to Python were met too
        assert {"_NEWLINE", "LPAR", "RPAR", "DEF"} <= kinds


def test_bad_symbol_steps_arguments_raise() -> None:
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    core = compiled.core
    assert isinstance(core, LexParserCore) and core.native_steps is not None
    with pytest.raises(IndexError, match="parser state out of range"):
        core.native_steps.after(10**8, 0)
    with pytest.raises(IndexError, match="parser state out of range"):
        core.native_steps.fresh(-5)
    with pytest.raises(IndexError, match="end class out of range"):
        core.native_steps.after(0, -1)
    kinds = np.zeros(core.parser.alphabet + 1, dtype=np.uint8)
    layout = SymbolParser(core.parser).native_layout(kinds)  # no indentation
    with pytest.raises(ValueError, match="more terminals"):
        native.symbol_steps(parser=core.parser, kinds=kinds, end_classes=[], **layout, after=core._after,
                            fresh=core.fresh_lexer_state)
    layout["indent"] = core.parser.alphabet
    with pytest.raises(ValueError, match="out of the parser's alphabet"):
        native.symbol_steps(parser=core.parser, kinds=kinds[:2], end_classes=[], **layout, after=core._after,
                            fresh=core.fresh_lexer_state)


def test_a_lexer_mode_core_with_c_steps_is_collected() -> None:
    """The C steps hold the core's methods, and the core holds them: the collector must see that
    cycle (`SymbolSteps` supports it), or every compiled grammar dropped would stay in memory."""
    import gc
    import weakref

    compiled = compiler("smollm2").compile(Grammar.builtin("go"))
    core = LexParserCore(ParserCore(compiled.artifacts.rtn, lazy=True), LexerCore(compiled.core.lexer.automata))
    assert core.native_steps is not None
    gone = weakref.ref(core)
    del core
    gc.collect()
    assert gone() is None


def test_distinct_in_c_is_numpy_unique_with_index_and_inverse() -> None:
    rng = np.random.default_rng(5)
    slots = np.empty(10_000, dtype=np.int32)
    for size in (0, 1, 7, 300, 20_000):
        numbers = rng.integers(0, 10_000 if size > 300 else 40, size)
        keys, chosen, group = native.distinct(slots, numbers)
        assert keys.tolist() == np.unique(numbers).tolist()
        assert (numbers[chosen] == keys).all() and (keys[group] == numbers).all()
    with pytest.raises(IndexError, match="out of the slots"):
        native.distinct(slots, np.array([3, 10_000]))
    with pytest.raises(IndexError, match="out of the slots"):
        native.distinct(slots, np.array([-1]))


def test_pack_rows_in_c_sets_the_bits_of_the_rows_tokens() -> None:
    """A lexer state's accepted and failing tokens from trie row ranges, as numpy packs them."""
    trie = token_trie(vocabulary("llama3"))
    rng = np.random.default_rng(7)
    lo = np.sort(rng.choice(trie.num_tokens - 50, 300, replace=False))
    hi = lo + rng.integers(0, 50, len(lo))
    vocab_size = vocabulary("llama3").vocab_size
    words = np.zeros(bitmask_width(vocab_size), dtype=np.uint32)
    native.pack_rows(words, trie.order, lo, hi)
    assert (words == pack_ids(trie.token_ids(expand_ranges(lo, hi)), vocab_size)).all() and words.any()
    with pytest.raises(IndexError, match="row range out of the trie"):
        native.pack_rows(words, trie.order, np.array([0]), np.array([trie.num_tokens + 1]))
    with pytest.raises(IndexError, match="token out of the row"):
        native.pack_rows(words[:10], trie.order, lo, hi)


def test_native_entry_points_refuse_what_they_cannot_use() -> None:
    """A lazy core where byte-level position masks need an expanded one, a walker that could keep
    no result, a walker cleared in the middle of a walk (by the split it called, as another thread
    could while the split runs), a bitmask row of the wrong type: each a clear error."""
    compiled = compiler("smollm2").compile(Grammar.builtin("python"))
    core = compiled.core
    assert isinstance(core, LexParserCore) and core.native_steps is not None
    with pytest.raises(ValueError, match="lazy"):
        PositionClassifier(core.parser, token_trie(compiled.vocab), compiled.vocab_size)
    with pytest.raises(ValueError, match="limit must be at least 1"):
        native.residual_walker(steps=core.native_steps, split=lambda *args: None, limit=0)
    computer = LexerMaskComputer(core, vocabulary("smollm2"))
    matcher = GrammarMatcher(compiled)
    assert matcher.accept_bytes(b"import os\nx = os")
    pid, lid = core.configs(matcher._history[-1])[0]
    groups = computer.position(lid).uncertain.items()
    resumed, group = next((core.after(pid, cls), group) for cls, group in groups if core.after(pid, cls) >= 0)
    walkers: list[native.ResidualWalker] = []

    def clearing(residuals: Residuals, lid: int, loops: frozenset[int]) -> object:
        walkers[0].clear()
        return computer.residual_sets.split(residuals, lid, loops)

    walker = native.residual_walker(steps=core.native_steps, split=clearing, limit=8)
    assert walker is not None
    walkers.append(walker)
    with pytest.raises(RuntimeError, match="while a walk is in progress"):
        walker.result(resumed, group.residuals)
    with pytest.raises(TypeError, match="uint32"):
        native.pack_rows(np.zeros(8, dtype=np.int64), np.zeros(4, dtype=np.int32), np.zeros(1), np.ones(1))


def _random_expr(rng: random.Random, depth: int = 0) -> ir.Expr:
    """Expressions of every IR class, nested, with empty and repeated parts."""
    roll = rng.random()
    if roll < 0.25 or depth > 2:
        return ir.Literal(rng.choice([b"", b"a", b"bc", b"\xff"]))
    if roll < 0.45:
        return ir.RuleRef(rng.choice("xyz"))
    if roll < 0.5:
        return ir.CharClass(rng.choice([((48, 57),), ((48, 57), (65, 70))]), rng.random() < 0.5)
    if roll < 0.55:
        return ir.ByteClass(((1, 2),))
    if roll < 0.65:
        return ir.Repeat(_random_expr(rng, depth + 1), rng.choice([0, 1]), rng.choice([None, 2]))
    parts = tuple(_random_expr(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    return ir.Sequence(parts) if roll < 0.82 else ir.Choice(parts)


def test_sequences_and_choices_made_in_c_are_pythons() -> None:
    """`ir.seq` and `ir.choice` are made in C (splicing, fusing literals, dropping repeats by
    equality or by hash past `SMALL_CHOICE` parts): the same nodes as the Python ones, on random
    expressions (equal copies among them) and on the rules of real schemas built either way."""
    assert ir._seq_in_c is not None and ir._choice_in_c is not None
    rng = random.Random(7)
    for _ in range(3000):
        items = tuple(_random_expr(rng) for _ in range(rng.randint(0, 6)))
        assert repr(ir.seq(*items)) == repr(ir._seq(items))
        alternatives = tuple(_random_expr(rng) for _ in range(rng.randint(0, 2 * ir.SMALL_CHOICE)))
        alternatives += tuple(copy.deepcopy(a) for a in rng.sample(alternatives, min(len(alternatives), 4)))
        made, expected = ir.choice(*alternatives), ir._choice(alternatives)
        assert type(made) is type(expected) and repr(made) == repr(expected)
    built = 0
    for path in sorted(BENCH.glob("*.json")):
        schema = json.loads(path.read_text())["schema"]
        try:
            in_c = Grammar.from_json_schema(schema, mode="validate").ir.rules
        except GrammarError:  # (unsupported keywords: the Python builders are not reached either)
            continue
        built += 1
        with mock.patch.object(ir, "_seq_in_c", None), mock.patch.object(ir, "_choice_in_c", None):
            in_python = Grammar.from_json_schema(schema, mode="validate").ir.rules
        assert repr(in_c) == repr(in_python)
    assert built > 100
