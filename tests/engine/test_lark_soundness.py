"""Lark grammars through the engine agree with Lark itself (docs/lark-semantics.md).

Sentences generated from each shared grammar, hand-written corpora and their mutants are labelled
by Lark (``parser="lalr"``); each is fed to the matcher token by token through a real tokenizer.
An accepted string must have every token allowed by the mask and EOS allowed at the end; a
rejected one must be refused at some token or denied EOS. At every step the mask and
``accept_token`` (two separate code paths) must agree on the token taken.
"""

from __future__ import annotations

import functools

import pytest

from codemask import Grammar, GrammarMatcher
from codemask.engine.compiler import CompiledGrammar
from tests.engine.conftest import compiler, encode, vocabulary
from tests.lark_harness import LarkCase, SentenceGenerator, lark_accepts, load_corpus, mutants, shared_case

# Shared grammars the engine takes (the others use lookarounds or Python's indentation post-lexer).
CASES = [
    "syncode/calc.lark",
    "syncode/json.lark",
    "syncode/sql.lark",
    "syncode/c.lark",
    "syncode/go.lark",
    "syncode/java.lark",
    "syncode/tiny.lark",
    "syncode/prover9.lark",
    "syncode/invariants.lark",
    "outlines/json.lark",
    "outlines/arithmetic.lark",
    "lark-parser/composition_csv.lark",
]
TOKENIZERS = ["llama3", "gemma3"]


@functools.cache
def compiled(relpath: str, tokenizer_name: str) -> tuple[LarkCase, CompiledGrammar]:
    case = shared_case(relpath)
    grammar = Grammar.from_lark(case.text, start=case.start, source=relpath)
    from codemask.grammar.lark import parse_lark

    grammar = Grammar(parse_lark(case.text, start=case.start, source=relpath, import_paths=list(case.import_paths)),
                      "lark")
    return case, compiler(tokenizer_name).compile(grammar)


def run(compiled_grammar: CompiledGrammar, tokenizer_name: str, text: str) -> bool:
    """Feed ``text`` token by token; True iff every token is taken and EOS is allowed at the end."""
    vocab = vocabulary(tokenizer_name)
    matcher = GrammarMatcher(compiled_grammar)
    for token_id in encode(tokenizer_name, text):
        allowed = matcher.is_token_allowed(token_id)
        taken = matcher.fork().accept_token(token_id)
        assert allowed == taken, f"mask and accept disagree on {vocab.token_bytes[token_id]!r} in {text!r}"
        if not taken:
            return False
        matcher.accept_token(token_id)
    eos = matcher.is_token_allowed(vocab.eos_token_id)
    assert eos == matcher.can_terminate()
    return eos


def samples(case: LarkCase, relpath: str) -> list[tuple[str, bool]]:
    generated = SentenceGenerator(case, seed=7).sentences(12)
    corpus = [s for s in load_corpus(relpath.split("/")[-1].removesuffix(".lark")) if s] if _has_corpus(relpath) else []
    labelled = [(s, lark_accepts(case, s)) for s in generated + corpus]
    for text, _ok in list(labelled)[:10]:
        labelled.extend(mutants(case, text, 3, seed=11))
    return labelled


def _has_corpus(relpath: str) -> bool:
    try:
        load_corpus(relpath.split("/")[-1].removesuffix(".lark"))
    except (OSError, KeyError, ValueError):
        return False
    return True


@pytest.mark.parametrize("tokenizer_name", TOKENIZERS)
@pytest.mark.parametrize("relpath", CASES)
def test_engine_agrees_with_lark(relpath: str, tokenizer_name: str) -> None:
    case, grammar = compiled(relpath, tokenizer_name)
    disagreements = []
    cases = samples(case, relpath)
    assert sum(ok for _, ok in cases) >= 8, "too few accepted samples to be a meaningful test"
    for text, lark_ok in cases:
        if run(grammar, tokenizer_name, text) != lark_ok:
            disagreements.append((text, lark_ok))
    assert not disagreements, disagreements[:5]
