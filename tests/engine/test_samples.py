"""Sample code for precomputing lexer-mode masks (`codemask.engine.samples`): the builtin Python
grammar's samples are codemask's own modules, tokenized by the vocabulary alone."""

from __future__ import annotations

from codemask import Grammar
from codemask.engine.samples import PER_FILE, sample_texts, sample_tokens
from tests.engine.conftest import vocabulary


def test_python_samples_are_codemasks_modules_spelt_by_the_vocabulary() -> None:
    """Each sequence spells the start of one of the sample texts byte for byte, with ordinary
    tokens only, at most `PER_FILE` of them, within the budget; other grammars have none."""
    vocab = vocabulary("llama3")
    python = Grammar.builtin("python")
    texts = [text.encode() for text in sample_texts(python)]
    assert len(texts) > 50 and any(b"class LexerMaskComputer" in text for text in texts)
    sequences = sample_tokens(python, vocab, budget=5_000)
    assert sum(len(tokens) for tokens in sequences) == 5_000 and max(len(tokens) for tokens in sequences) <= PER_FILE
    special = vocab.special_ids | vocab.stop_token_ids
    for tokens, text in zip(sequences, [text for text in texts if text], strict=False):
        spelt = b"".join(vocab.token_bytes[token] for token in tokens)
        assert text.startswith(spelt) and not special & set(tokens)
    assert sample_tokens(Grammar.builtin("sql"), vocab) == [] and sample_texts(Grammar.builtin("json")) == []
