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
from codemask.engine.mask_computer import MaskComputer
from codemask.engine.parser import DEAD, ParserCore
from codemask.engine.position_masks import LazyPositionMasks, PositionMasks
from codemask.engine.token_trie import token_trie
from tests.data_paths import TEST_DATA
from tests.engine.conftest import compiler, residual_bytes, vocabulary

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
