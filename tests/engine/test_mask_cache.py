"""The compile-time position cache against a token-by-token oracle on real vocabularies.

`build_position_masks` walks all positions at once and shares trie subtrees between them; the
oracle here walks single tokens, one at a time, from each position's frame-local state with
`ParserCore.walk`-style steps, and classifies them by definition: *accepted* when every byte is
consumed with a stack still waiting or the frame's rule may end exactly there, *uncertain* (with
its residual) when the frame's rule ends part-way, rejected otherwise.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from codemask import Grammar
from codemask.engine.compiler import CompiledGrammar
from codemask.engine.parser import DEAD, ParserCore
from tests.engine.conftest import compiler, vocabulary

BENCH = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "jsonschemabench"
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


def check_positions(compiled: CompiledGrammar, seed: int) -> None:
    masks = compiled.artifacts.masks
    assert masks is not None
    core = ParserCore(compiled.artifacts.rtn)
    vocab = compiled.vocab
    ids = [i for i, b in enumerate(vocab.token_bytes) if b and i not in vocab.special_ids | vocab.stop_token_ids]
    sample = random.Random(seed).sample(ids, min(SAMPLE_TOKENS, len(ids)))
    positions = np.flatnonzero(compiled.artifacts.rtn.scanning)
    for position in positions.tolist():
        row = int(masks.row_of_state[position])
        bits = np.unpackbits(masks.accepted[row].view(np.uint8), bitorder="little")
        unc = masks.uncertain[row]
        pairs = [] if unc is None else zip(unc.token_ids.tolist(), unc.residual_of.tolist(), strict=True)
        residual_of = {t: bytes(unc.residuals[r, : unc.residual_len[r]]) for t, r in pairs} if unc else {}
        for token in sample:
            data = vocab.token_bytes[token]
            accepted, exits = oracle(core, position, data)
            assert bool(bits[token]) == accepted, (position, data)
            if accepted or token not in residual_of:
                continue
            assert len(data) - len(residual_of[token]) in exits, (position, data, residual_of[token])


@pytest.mark.parametrize("tokenizer", ["llama3", "gemma3"])
def test_builtin_json_positions_match_the_token_oracle(tokenizer: str) -> None:
    check_positions(compiler(tokenizer).compile(Grammar.builtin("json")), seed=1)


def test_json_schema_positions_match_the_token_oracle() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())["schema"]
    check_positions(compiler("qwen3").compile(Grammar.from_json_schema(schema)), seed=2)


def test_subtree_sharing_keeps_every_uncertain_token_that_can_follow() -> None:
    """Tokens that leave a string and close the object (``"}``) are uncertain, never dropped."""
    compiled = compiler("llama3").compile(Grammar.from_json_schema(
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}))
    masks = compiled.artifacts.masks
    assert masks is not None
    vocab = vocabulary("llama3")
    closing = vocab.token_bytes.index(b'"}')
    assert any(u is not None and closing in u.token_ids.tolist() for u in masks.uncertain)
