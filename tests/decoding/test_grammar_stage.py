"""The grammar stage and the step layout: masks per row, K+1 rows per sequence, mixed batches."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from codemask import Grammar, GrammarMatcher, MatcherError
from codemask.decoding.grammar import GrammarStage
from codemask.decoding.pipeline import StepLayout
from codemask.engine.bitmask import unpack_bitmask
from tests.engine.conftest import compiler, encode

TOKENIZER = "smollm2"
DOCUMENT = json.dumps({"name": "codemask", "tags": ["grammar", "json"], "stars": 42, "ok": True})


def _json_matcher() -> GrammarMatcher:
    return GrammarMatcher(compiler(TOKENIZER).compile(Grammar.builtin("json")))


def _allowed(logits_row: torch.Tensor) -> np.ndarray:
    return torch.isfinite(logits_row).numpy()


def _expected(matcher: GrammarMatcher, vocab_size: int) -> np.ndarray:
    return unpack_bitmask(matcher.next_token_bitmask(), vocab_size)


@pytest.mark.parametrize("overlap", [True, False])
def test_rows_are_masked_by_their_own_sequence_and_unconstrained_rows_untouched(overlap: bool) -> None:
    tokens = encode(TOKENIZER, DOCUMENT)
    a, b = _json_matcher(), _json_matcher()
    for t in tokens[:5]:
        assert a.accept_token(t)
    vocab_size = a.compiled.vocab_size
    stage = GrammarStage([a, None, b], vocab_size, overlap=overlap)
    layout = StepLayout.one_row_per_sequence([0, 1, 2])
    logits = torch.randn(3, vocab_size)
    original = logits.clone()
    stage.prepare(layout)
    stage.apply(logits, layout)
    assert (_allowed(logits[0]) == _expected(a, vocab_size)).all()
    assert torch.equal(logits[1], original[1])
    assert (_allowed(logits[2]) == _expected(b, vocab_size)).all()
    assert stage.mask_time_s[0] > 0 and stage.mask_time_s[1] == 0
    stage.close()


def test_verification_rows_equal_the_masks_after_each_draft() -> None:
    tokens = encode(TOKENIZER, DOCUMENT)
    matcher = _json_matcher()
    for t in tokens[:3]:
        assert matcher.accept_token(t)
    drafts = tokens[3:9]
    vocab_size = matcher.compiled.vocab_size
    stage = GrammarStage([matcher], vocab_size)
    layout = StepLayout.verification({0: drafts})
    assert layout.num_rows == len(drafts) + 1 and layout.offsets == tuple(range(len(drafts) + 1))
    logits = torch.zeros(layout.num_rows, vocab_size)
    stage.prepare(layout)
    stage.apply(logits, layout)
    walker = matcher.fork()
    for row in range(layout.num_rows):
        assert (_allowed(logits[row]) == _expected(walker, vocab_size)).all(), row
        if row < len(drafts):
            assert walker.accept_token(drafts[row])
    assert matcher.num_accepted == 3  # the stage walked a fork, not the sequence's matcher
    assert not stage.invalid_rows
    stage.close()


def test_a_refused_draft_invalidates_its_row_and_the_later_ones() -> None:
    matcher = _json_matcher()
    vocab_size = matcher.compiled.vocab_size
    (good,) = encode(TOKENIZER, "[")
    (bad,) = encode(TOKENIZER, ":")
    drafts = [good, bad, good]
    stage = GrammarStage([matcher], vocab_size, overlap=False)
    layout = StepLayout.verification({0: drafts})
    logits = torch.zeros(layout.num_rows, vocab_size)
    stage.apply(logits, layout)
    assert stage.invalid_rows == {2, 3}
    assert torch.isfinite(logits[2]).all()  # no all--inf row that would give NaN probabilities


def test_commit_checks_tokens_and_leaves_the_state_on_refusal() -> None:
    matcher = _json_matcher()
    stage = GrammarStage([matcher], matcher.compiled.vocab_size, overlap=False)
    tokens = encode(TOKENIZER, '{"a": 1}')
    stage.commit(0, tokens[:2])
    assert matcher.num_accepted == 2
    with pytest.raises(MatcherError, match="refuses token"):
        stage.commit(0, [tokens[2], encode(TOKENIZER, "]")[0]])
    assert matcher.num_accepted == 2
    stage.rollback(0, 2)
    assert matcher.num_accepted == 0


def test_only_stop_allowed_once_a_closed_grammar_is_complete() -> None:
    compiled = compiler(TOKENIZER).compile(Grammar.from_regex(r"(yes|no)\."))
    matcher = GrammarMatcher(compiled)
    stage = GrammarStage([matcher, None], compiled.vocab_size, overlap=False)
    stage.commit(0, encode(TOKENIZER, "yes"))
    assert not stage.only_stop_allowed(0)
    stage.commit(0, encode(TOKENIZER, "."))
    assert stage.only_stop_allowed(0)
    assert not stage.only_stop_allowed(1)


def test_layout_refuses_offsets_beyond_the_drafts() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        StepLayout((0, 0), (0, 2), {0: (5,)})
    with pytest.raises(ValueError, match="one entry per row"):
        StepLayout((0,), (0, 1))
