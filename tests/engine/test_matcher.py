"""GrammarMatcher API behaviour with a real tokenizer: acceptance, masks, EOS, rollback, fork, misuse."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from codemask import GrammarMatcher, MatcherError, allocate_token_bitmask
from tests.engine.conftest import compile_ebnf, encode, vocabulary

GREETING = r'''
root ::= "Hello, " name "!" ("\n" | "")
name ::= [A-Z] [a-z]+
'''


def allowed(matcher: GrammarMatcher, token_id: int) -> bool:
    return matcher.is_token_allowed(token_id)


@pytest.fixture(scope="module")
def greeting():
    return compile_ebnf(GREETING)


def test_accepts_a_sentence_token_by_token_and_allows_eos_only_at_the_end(greeting):
    vocab = vocabulary("llama3")
    matcher = GrammarMatcher(greeting)
    ids = encode("llama3", "Hello, World!")
    for tid in ids:
        assert not allowed(matcher, vocab.eos_token_id)
        assert allowed(matcher, tid)
        assert matcher.accept_token(tid)
    assert matcher.can_terminate()
    assert allowed(matcher, vocab.eos_token_id)
    assert matcher.accept_token(vocab.eos_token_id)
    assert matcher.is_terminated()


def test_refused_token_returns_false_and_keeps_the_state(greeting):
    matcher = GrammarMatcher(greeting)
    before = matcher.next_token_bitmask().copy()
    bad = encode("llama3", "Goodbye")[0]
    assert not allowed(matcher, bad)
    assert not matcher.accept_token(bad)
    assert matcher.num_accepted == 0
    np.testing.assert_array_equal(matcher.next_token_bitmask(), before)


def test_mask_agrees_with_accept_for_every_token(greeting):
    """The mask (cache + residual walks) and accept_token (byte walk) are separate code paths."""
    vocab = vocabulary("llama3")
    matcher = GrammarMatcher(greeting)
    for tid in encode("llama3", "Hello, Wor"):
        assert matcher.accept_token(tid)
    mask = matcher.next_token_bitmask()
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: vocab.vocab_size].astype(bool)
    for token_id in range(vocab.vocab_size):
        twin = matcher.fork()
        assert twin.accept_token(token_id) == bits[token_id], vocab.token_bytes[token_id]
    assert bits.sum() > 10  # "ld", "ldwide", "m", … and the "!"-free lowercase runs


def test_rollback_fork_reset(greeting):
    matcher = GrammarMatcher(greeting)
    ids = encode("llama3", "Hello, Ada!")
    for tid in ids:
        assert matcher.accept_token(tid)
    twin = matcher.fork()
    matcher.rollback(2)
    assert matcher.num_accepted == len(ids) - 2
    assert not matcher.can_terminate()
    assert twin.can_terminate()  # the fork is independent
    for tid in ids[-2:]:
        assert matcher.accept_token(tid)
    assert matcher.can_terminate()
    matcher.reset()
    assert matcher.num_accepted == 0


def test_misuse_raises_and_leaves_the_state(greeting):
    vocab = vocabulary("llama3")
    matcher = GrammarMatcher(greeting)
    with pytest.raises(MatcherError):
        matcher.rollback(1)
    with pytest.raises(MatcherError):
        matcher.accept_token(vocab.vocab_size)
    with pytest.raises(MatcherError):
        matcher.accept_token(-1)
    for tid in encode("llama3", "Hello, Bo!"):
        matcher.accept_token(tid)
    assert matcher.accept_token(vocab.eos_token_id)
    with pytest.raises(MatcherError):
        matcher.accept_token(encode("llama3", "\n")[0])
    assert matcher.is_terminated()
    matcher.rollback(1)
    assert not matcher.is_terminated() and matcher.can_terminate()


def test_after_termination_only_stop_tokens(greeting):
    vocab = vocabulary("llama3")
    matcher = GrammarMatcher(greeting)
    for tid in encode("llama3", "Hello, Bo!"):
        matcher.accept_token(tid)
    matcher.accept_token(vocab.eos_token_id)
    mask = matcher.next_token_bitmask()
    bits = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[: vocab.vocab_size])
    assert set(bits.tolist()) == set(vocab.stop_token_ids)


def test_special_tokens_are_never_allowed(greeting):
    vocab = vocabulary("llama3")
    matcher = GrammarMatcher(greeting)
    specials = [i for i in vocab.special_ids if i not in vocab.stop_token_ids][:50]
    assert specials
    assert not any(allowed(matcher, i) for i in specials)
    assert not any(matcher.fork().accept_token(i) for i in specials)


def test_jump_forward_returns_the_forced_continuation(greeting):
    matcher = GrammarMatcher(greeting)
    assert matcher.find_jump_forward_bytes() == b"Hello, "
    assert matcher.accept_bytes(b"Hello, X")
    assert matcher.find_jump_forward_bytes() == b""  # a lowercase letter: a real choice
    assert matcher.accept_bytes(b"y!")
    assert matcher.find_jump_forward_bytes() == b""  # may end, or add "\n"


def test_accept_bytes_partial_utf8_and_refusal():
    compiled = compile_ebnf('root ::= "é" [a-z]')
    matcher = GrammarMatcher(compiled)
    assert matcher.accept_bytes("é".encode()[:1])  # half a character is a viable prefix
    assert not matcher.accept_bytes(b"x")
    assert matcher.accept_bytes("é".encode()[1:] + b"q")
    assert matcher.can_terminate()


def test_fill_into_torch_bitmask_rows(greeting):
    vocab = vocabulary("llama3")
    bitmask = allocate_token_bitmask(2, vocab.vocab_size)
    first, second = GrammarMatcher(greeting), GrammarMatcher(greeting)
    second.accept_bytes(b"Hello, ")
    first.fill_next_token_bitmask(bitmask, 0)
    second.fill_next_token_bitmask(bitmask, 1)
    np.testing.assert_array_equal(bitmask[0].numpy(), first.next_token_bitmask())
    np.testing.assert_array_equal(bitmask[1].numpy(), second.next_token_bitmask())
    assert not torch.equal(bitmask[0], bitmask[1])


def test_misuse_of_the_matcher_api_is_a_clear_error() -> None:
    """Each of these raised a raw AttributeError or IndexError, or was silently wrong (a 1-D
    bitmask ignored ``row``): an uncompiled grammar, bitmasks that are not int32 arrays or
    tensors of one or two dimensions, rows that are not ints or out of range, and a rollback
    count that is not an int."""
    from codemask import Grammar

    with pytest.raises(TypeError, match=r"GrammarMatcher takes a CompiledGrammar, got Grammar \(compile it first"):
        GrammarMatcher(Grammar.builtin("json"))  # type: ignore[arg-type]
    matcher = GrammarMatcher(compile_ebnf('root ::= "hi"', "gpt2"))
    words = (vocabulary("gpt2").vocab_size + 31) // 32
    cases: list[tuple[object, object, type[Exception], str]] = [
        ([[0] * words], 0, TypeError, "bitmask must be an int32 numpy array or torch tensor, got list"),
        (np.array(3, dtype=np.int32), 0, ValueError, "bitmask must be 1-D .* got 0-D"),
        (np.zeros((1, 1, words), dtype=np.int32), 0, ValueError, "got 3-D"),
        (np.zeros((2, words), dtype=np.int32), 1.0, TypeError, "row must be an int, got float"),
        (np.zeros((2, words), dtype=np.int32), True, TypeError, "row must be an int, got bool"),
        (np.zeros((2, words), dtype=np.int32), 2, ValueError, "row 2 is out of range: the bitmask has 2 rows"),
        (np.zeros((2, words), dtype=np.int32), -1, ValueError, "row -1 is out of range"),
        (np.zeros(words, dtype=np.int32), 1, ValueError, r"a 1-D bitmask holds one row \(row 0\)"),
        (torch.zeros((2, words), dtype=torch.int32), 5, ValueError, "row 5 is out of range"),
        (np.zeros((1, words), dtype=np.int64), 0, ValueError, "bitmask must be int32, got int64"),
    ]
    for bitmask, row, error, message in cases:
        with pytest.raises(error, match=message):
            matcher.fill_next_token_bitmask(bitmask, row)  # type: ignore[arg-type]
    row = np.zeros((3, words), dtype=np.int32)
    matcher.fill_next_token_bitmask(row, np.int64(2))  # numpy integers are rows too
    assert row[2].any() and not row[:2].any()
    assert matcher.accept_bytes("hi")
    for count, message in (("1", "got str"), (1.0, "got float"), (True, "got bool")):
        with pytest.raises(MatcherError, match=rf"rollback takes a number of tokens \(an int\), {message}"):
            matcher.rollback(count)  # type: ignore[arg-type]
    matcher.rollback(np.int32(1))
    assert matcher.num_accepted == 0
