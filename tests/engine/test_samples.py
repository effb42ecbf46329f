"""Sample code for precomputing lexer-mode masks (`codemask.engine.samples`): each builtin code
grammar's tour of its syntax, and for Python codemask's own modules too, tokenized by the vocabulary
alone."""

from __future__ import annotations

import ast
import sys

import pytest

from codemask import Grammar, GrammarCompiler, GrammarMatcher
from codemask.engine.samples import PER_FILE, has_samples, sample_texts, sample_tokens, tour_text, toured
from tests.engine.conftest import vocabulary
from tests.grammar.code_oracles import ORACLES


def test_python_samples_are_the_tour_and_codemasks_modules_spelt_by_the_vocabulary() -> None:
    """Each sequence spells the start of one of the sample texts byte for byte, with ordinary
    tokens only: the tour whole, then at most `PER_FILE` tokens of each module, within the
    budget; other grammars have none."""
    vocab = vocabulary("llama3")
    python = Grammar.builtin("python")
    texts = [text.encode() for text in sample_texts(python)]
    assert texts[0] == (tour_text(python) or "").encode() and b"match command:" in texts[0]
    assert len(texts) > 50 and any(b"class LexerMaskComputer" in text for text in texts)
    sequences = sample_tokens(python, vocab, budget=5_000)
    assert sum(len(tokens) for tokens in sequences) == 5_000
    assert b"".join(vocab.token_bytes[token] for token in sequences[0]) == texts[0]  # the tour whole
    assert len(sequences[0]) > PER_FILE and max(len(tokens) for tokens in sequences[1:]) <= PER_FILE
    special = vocab.special_ids | vocab.stop_token_ids
    for tokens, text in zip(sequences, [text for text in texts if text], strict=False):
        spelt = b"".join(vocab.token_bytes[token] for token in tokens)
        assert text.startswith(spelt) and not special & set(tokens)
    assert sample_tokens(Grammar.builtin("json"), vocab) == [] and not has_samples(Grammar.builtin("json"))
    assert len(sample_texts(Grammar.builtin("go"))) == 1  # (codemask's modules are Python's alone)
    assert not has_samples(Grammar.from_lark('start: "a"'))  # (a user's grammar: no builtin name)
    assert toured() == ["c", "go", "java", "javascript", "python", "sql"]


@pytest.mark.parametrize("language", toured())
def test_each_tour_is_a_program_the_grammar_and_the_languages_parser_take_whole(language: str) -> None:
    """A tour is read, never built or imported: the grammar takes every token of it and may end
    after it, so that the precompute runs it to the end, and the language's own parser accepts it
    (Python's tour is 3.12: `ast` of an older interpreter refuses it)."""
    grammar = Grammar.builtin(language)
    tour = tour_text(grammar)
    assert tour is not None
    vocab = vocabulary("smollm2")
    compiled = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=False).compile(grammar)
    tokens = sample_tokens(grammar, vocab, budget=len(tour))[0]
    assert b"".join(vocab.token_bytes[token] for token in tokens) == tour.encode()
    matcher = GrammarMatcher(compiled)
    for index, token in enumerate(tokens):
        assert matcher.accept_token(token), f"token {index} {vocab.token_bytes[token]!r} refused"
    assert matcher.accept_token(min(vocab.stop_token_ids))
    if language != "python":
        assert ORACLES[language](tour)
    elif sys.version_info >= (3, 12):
        ast.parse(tour)
    else:
        with pytest.raises(SyntaxError):  # (it uses 3.12's type statement and generics)
            ast.parse(tour)
