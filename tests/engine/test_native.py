"""The C trie walk (`codemask.engine._native`) against the numpy walk it replaces.

Both classify every position of real grammars on real vocabularies from a fresh parser core (so
the C walk meets unknown transitions and goes round the fill-and-resume loop); the results must be
identical. Bad arguments must raise, not read out of bounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from codemask import Grammar
from codemask.engine import native
from codemask.engine.mask_cache import PositionClassifier, Uncertain
from codemask.engine.parser import ParserCore
from codemask.engine.token_trie import TokenTrie, token_trie
from tests.engine.conftest import compiler, vocabulary

BENCH = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "jsonschemabench"
PYTHON_FUNCTION = Path(__file__).resolve().parents[2] / "grammars" / "python_function.ebnf"


def test_the_extension_is_built_and_used_by_default() -> None:
    assert native.available(), "codemask.engine._native was not built: `pip install -e .` needs a C compiler"
    assert native.enabled()


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
    if source == "json":
        grammar = Grammar.builtin("json")
    elif source == "python_function":
        grammar = Grammar.from_ebnf(PYTHON_FUNCTION.read_text())
    else:
        grammar = Grammar.from_json_schema(json.loads((BENCH / source).read_text())["schema"])
    c_accepted, c_uncertain = classify_all(grammar, tokenizer, use_native=True)
    np_accepted, np_uncertain = classify_all(grammar, tokenizer, use_native=False)
    assert (c_accepted == np_accepted).all()
    trie = token_trie(vocabulary(tokenizer))
    assert sum(u is not None for u in c_uncertain) > 0  # the grammar has positions that leave their frame
    for a, b in zip(c_uncertain, np_uncertain, strict=True):
        assert uncertain_pairs(trie, a) == uncertain_pairs(trie, b)


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
