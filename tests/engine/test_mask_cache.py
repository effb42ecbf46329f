"""The compile-time position cache against a token-by-token oracle on real vocabularies.

`build_position_masks` walks all positions at once and shares trie subtrees between them, and
`LazyPositionMasks` classifies a few positions at a time as parser states first need them, reusing
the subtree walks of earlier calls; the oracle here walks single tokens, one at a time, from each
position's frame-local state with `ParserCore.walk`-style steps, and classifies them by
definition: *accepted* when every byte is consumed with a stack still waiting or the frame's rule
may end exactly there, *uncertain* (with its residual) when the frame's rule ends part-way,
rejected otherwise.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from codemask import Grammar
from codemask.engine.compiler import CompiledGrammar
from codemask.engine.mask_cache import (
    LazyPositionMasks,
    MaskComputer,
    PositionClassifier,
    PositionMasks,
    SharedPositions,
    Uncertain,
    uncertain_entries,
)
from codemask.engine.parser import DEAD, ParserCore
from codemask.engine.token_trie import TokenTrie, token_trie
from tests.data_paths import TEST_DATA
from tests.engine.conftest import compiler, vocabulary

BENCH = TEST_DATA / "jsonschemabench"
SCHEMA_FILE = BENCH / "Glaiveai2K---calculate_tax_ca6130e8.json"
SAMPLE_TOKENS = 800


def oracle(core: ParserCore, position: int, data: bytes) -> tuple[bool, set[int]]:
    """(accepted, exit offsets) of one token from one position, byte by byte."""
    state = core.frame_state(position)
    exits: set[int] = set()
    for k, byte in enumerate(data):
        if state == DEAD:
            return False, exits
        if k and core.flags[state]:
            exits.add(k)
        state = core.step(state, byte)
    return state != DEAD, exits


def position_table(compiled: CompiledGrammar, seed: int) -> PositionMasks | LazyPositionMasks:
    """The precomputed masks, or the lazy ones classified in small random batches of positions."""
    if compiled.artifacts.masks is not None:
        return compiled.artifacts.masks
    table = compiled.masks.masks
    assert isinstance(compiled.masks, MaskComputer) and isinstance(table, LazyPositionMasks)
    positions = np.flatnonzero(compiled.artifacts.rtn.scanning).tolist()
    random.Random(seed).shuffle(positions)
    for lo in range(0, len(positions), 7):
        table.rows(positions[lo : lo + 7])
    assert table.num_classified == len(positions)
    return table


def residual_bytes(trie: TokenTrie, unc: Uncertain, index: int) -> bytes:
    start = int(unc.residual_starts[index])
    return bytes(trie.matrix[unc.residual_rows[index], start : start + int(unc.residual_len[index])])


def check_positions(compiled: CompiledGrammar, seed: int) -> None:
    table = position_table(compiled, seed)
    trie = token_trie(compiled.vocab)
    core = ParserCore(compiled.artifacts.rtn)
    vocab = compiled.vocab
    ids = [i for i, b in enumerate(vocab.token_bytes) if b and i not in vocab.special_ids | vocab.stop_token_ids]
    sample = random.Random(seed).sample(ids, min(SAMPLE_TOKENS, len(ids)))
    positions = np.flatnonzero(compiled.artifacts.rtn.scanning)
    for position in positions.tolist():
        row = table.rows([position])[0]
        bits = np.unpackbits(table.accepted_row(row).view(np.uint8), bitorder="little")
        unc = table.uncertain_of(row)
        pairs = [] if unc is None else zip(unc.token_ids.tolist(), unc.residual_of.tolist(), strict=True)
        residual_of = {t: residual_bytes(trie, unc, r) for t, r in pairs} if unc else {}
        for token in sample:
            data = vocab.token_bytes[token]
            accepted, exits = oracle(core, position, data)
            assert bool(bits[token]) == accepted, (position, data)
            if accepted or token not in residual_of:
                continue
            assert len(data) - len(residual_of[token]) in exits, (position, data, residual_of[token])


@pytest.mark.parametrize(("tokenizer", "precompute"), [("llama3", True), ("llama3", False), ("gemma3", True)])
def test_builtin_json_positions_match_the_token_oracle(tokenizer: str, precompute: bool) -> None:
    check_positions(compiler(tokenizer, precompute).compile(Grammar.builtin("json")), seed=1)


@pytest.mark.parametrize("precompute", [True, False])
def test_json_schema_positions_match_the_token_oracle(precompute: bool) -> None:
    schema = json.loads(SCHEMA_FILE.read_text())["schema"]
    check_positions(compiler("qwen3", precompute).compile(Grammar.from_json_schema(schema, mode="validate")), seed=2)


def test_subtree_sharing_keeps_every_uncertain_token_that_can_follow() -> None:
    """Tokens that leave a string and close the object (``"}``) are uncertain, never dropped."""
    compiled = compiler("llama3", precompute=True).compile(Grammar.from_json_schema(
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}))
    masks = compiled.artifacts.masks
    assert masks is not None
    vocab = vocabulary("llama3")
    closing = vocab.token_bytes.index(b'"}')
    assert any(u is not None and closing in u.token_ids.tolist() for u in masks.uncertain)


def test_positions_shared_between_grammars_equal_a_fresh_walk() -> None:
    """Two schemas with the same string and number rules: the second takes those positions from the
    process-wide cache, and they must be exactly what walking its own automata gives."""
    trie = token_trie(vocabulary("llama3"))
    first = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "number"}}}
    second = {"type": "array", "items": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 80}, "score": {"type": "number"}}}, "maxItems": 40}
    for schema in (first, second):
        compiled = compiler("llama3").compile(Grammar.from_json_schema(schema, mode="validate"))
        positions = np.flatnonzero(compiled.artifacts.rtn.scanning)
        shared = SharedPositions.of(trie)
        hits_before = shared.hits
        reused = PositionClassifier(compiled.core, trie, compiled.vocab_size).classify(positions)
        fresh = PositionClassifier(compiled.core, trie, compiled.vocab_size, share=False).classify(positions)
        assert (reused[0] == fresh[0]).all()
        for a, b in zip(reused[1], fresh[1], strict=True):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert uncertain_pairs(trie, a) == uncertain_pairs(trie, b)
    assert shared.hits > hits_before  # the second schema did reuse positions


def test_free_string_positions_are_shared_whatever_follows_the_string() -> None:
    """A free string is one shared rule (`Rule.shared`) whose positions are keyed without the bytes
    that follow it: a string at the root (nothing follows), as an array item (``,``/``]``) and as
    an object value reuse one walk, each filtered to its own followers, and equal a fresh walk."""
    trie = token_trie(vocabulary("llama3"))
    shared = SharedPositions.of(trie)
    shared.clear()
    schemas = [{"type": "string"}, {"type": "array", "items": {"type": "string"}},
               {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}]
    string_rule_hits = 0
    for schema in schemas:
        compiled = compiler("llama3").compile(Grammar.from_json_schema(schema, mode="validate"))
        rtn = compiled.artifacts.rtn
        assert rtn.shared is not None and rtn.shared.sum() == 1  # the free string, never inlined
        in_string = np.flatnonzero(rtn.scanning & rtn.shared[rtn.state_rule])
        hits_before = shared.hits
        reused = PositionClassifier(compiled.core, trie, compiled.vocab_size).classify(in_string)
        string_rule_hits += shared.hits - hits_before
        fresh = PositionClassifier(compiled.core, trie, compiled.vocab_size, share=False).classify(in_string)
        assert (reused[0] == fresh[0]).all()
        for a, b in zip(reused[1], fresh[1], strict=True):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert uncertain_pairs(trie, a) == uncertain_pairs(trie, b)
    assert string_rule_hits > 0  # the later grammars took the string's positions from the first


def uncertain_pairs(trie: TokenTrie, unc: Uncertain) -> set[tuple[int, bytes]]:
    return {(t, residual_bytes(trie, unc, r)) for t, r in zip(unc.token_ids.tolist(), unc.residual_of.tolist(),
                                                               strict=True)}


def test_uncertain_entries_group_each_owners_residuals_by_their_bytes() -> None:
    """Per owner, the record holds every exiting token (duplicate spellings included) with the
    residual bytes it was given, each distinct residual once, represented by its first exit."""
    trie = token_trie(vocabulary("llama3"))
    rng = np.random.default_rng(3)
    count = 40
    sizes = rng.integers(0, 3000, count)
    sizes[::7] = 0  # owners without exits
    owner = np.repeat(np.arange(count), sizes)
    rows = rng.integers(0, trie.num_tokens, len(owner))
    # many residuals shared (short tails of common tokens), some long
    offsets = np.maximum(trie.lengths[rows].astype(np.int64) - rng.integers(1, 4, len(owner)), 0)
    offsets[::5] = 0
    batched = uncertain_entries(trie, owner, rows, offsets, count)
    for i in range(count):
        mine = np.flatnonzero(owner == i)
        got = batched[i]
        if not len(mine):
            assert got is None
            continue
        assert got is not None
        tails = [bytes(trie.matrix[r, k:trie.lengths[r]]) for r, k in zip(rows[mine], offsets[mine], strict=True)]
        want = {(int(t), tail) for r, tail in zip(rows[mine].tolist(), tails, strict=True)
                for t in trie.token_ids(np.array([r])).tolist()}
        assert uncertain_pairs(trie, got) == want
        residuals = [residual_bytes(trie, got, r) for r in range(len(got.residual_len))]
        assert sorted(residuals) == sorted(set(tails))  # each distinct residual exactly once
        first_of = {tail: (int(rows[j]), int(offsets[j])) for j, tail in zip(mine.tolist()[::-1], tails[::-1],
                                                                              strict=True)}
        for r, tail in enumerate(residuals):
            assert (int(got.residual_rows[r]), int(got.residual_starts[r])) == first_of[tail]
