"""A compiled grammar shared by request after request stays bounded: its interned parser states
live in generations, a new one started once the current one outgrows ``max_states``, the old one
freed with its last matcher. Masks are exactly a fresh compile's in every generation."""

from __future__ import annotations

import gc
import inspect
import json
import random
import textwrap
import weakref

import numpy as np
import pytest

from codemask import Grammar, GrammarCompiler, GrammarMatcher
from codemask.engine.compiler import CompiledGrammar, _num_states
from tests.engine.conftest import encode, vocabulary


def nested_document(rng: random.Random, budget: list[int]) -> object:
    """A random JSON value of about ``budget[0]`` containers, nested up to a few dozen deep."""
    if budget[0] <= 0 or rng.random() < 0.2:
        return rng.choice([rng.randrange(-1000, 1000), round(rng.uniform(-10, 10), 3), f"s{rng.randrange(100)}",
                           True, None])
    budget[0] -= 1
    if rng.random() < 0.5:
        return {rng.choice(["id", "name", "items", "meta"]): nested_document(rng, budget)
                for _ in range(rng.randrange(1, 3))}
    return [nested_document(rng, budget) for _ in range(rng.randrange(1, 3))]


def masks_of(matcher: GrammarMatcher, token_ids: list[int]) -> np.ndarray:
    rows = np.zeros((len(token_ids) + 1, (matcher.compiled.vocab_size + 31) // 32), dtype=np.int32)
    for i, token in enumerate(token_ids):
        matcher.fill_next_token_bitmask(rows, i)
        assert matcher.accept_token(token), i
    matcher.fill_next_token_bitmask(rows, len(token_ids))
    return rows


def test_generations_bound_a_shared_json_grammar_and_keep_its_masks() -> None:
    """Guards the unbounded growth of a shared compiled grammar (+11.5k states and +27 MB per
    nested-JSON request, still held after `reset`): with ``max_states=300``, forty nested
    documents through one grammar (lazily classified positions) start new generations, the
    current one never holds much more than the bound, an outgrown generation is freed once its
    matchers are gone, a reset matcher moves to the current generation, and every mask equals a
    fresh unbounded compile's."""
    vocab = vocabulary("llama3")
    grammar = Grammar.builtin("json")
    bounded = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=False,
                              max_parser_states=300).compile(grammar)
    reference = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=False).compile(grammar)
    rng = random.Random(7)
    reused = GrammarMatcher(bounded)
    first_core = weakref.ref(bounded.core)
    largest = 0
    for n in range(40):
        text = json.dumps(nested_document(rng, [rng.randrange(10, 40)]), indent=2 if n % 2 else None)
        token_ids = encode("llama3", text)
        reused.reset()
        assert reused._core is bounded.core
        got = masks_of(GrammarMatcher(bounded), token_ids)
        assert np.array_equal(got, masks_of(GrammarMatcher(reference), token_ids)), n
        assert np.array_equal(masks_of(reused, token_ids), got), n
        largest = max(largest, _num_states(bounded.core))
    assert bounded.generations >= 4
    assert _num_states(reference.core) > 1500 and largest < 800
    gc.collect()
    assert first_core() is None


def test_a_matcher_of_an_outgrown_generation_goes_on_in_it() -> None:
    """A renewal between two tokens of a running matcher does not disturb it: it keeps its own
    generation (its history names that generation's states) until it is reset."""
    vocab = vocabulary("gpt2")
    grammar = Grammar.builtin("json")
    compiled = GrammarCompiler(vocab, cache_dir=False, progress=False, max_parser_states=5).compile(grammar)
    reference = GrammarCompiler(vocab, cache_dir=False, progress=False).compile(grammar)
    token_ids = encode("gpt2", '{"a": [1, {"b": [[2], {"c": null}]}], "d": "e"}')
    old = GrammarMatcher(compiled)
    half = len(token_ids) // 2
    want = masks_of(GrammarMatcher(reference), token_ids)
    assert np.array_equal(masks_of(old, token_ids[:half])[:half], want[:half])
    GrammarMatcher(compiled)  # the grammar renews for this one
    assert old._core is not compiled.core and compiled.generations == 2
    twin = old.fork()
    old.rollback(3)
    assert np.array_equal(masks_of(old, token_ids[half - 3:]), want[half - 3:])
    assert np.array_equal(masks_of(twin, token_ids[half:]), want[half:])


def test_generations_of_a_lexer_grammar_share_its_lexer_states() -> None:
    """In lexer mode a new generation keeps the lexer's states, their classifications and the
    residual sets (they depend on no parser state): after renewals the masks along a real file
    equal a fresh compile's, and the classified lexer states are not classified again."""
    vocab = vocabulary("smollm2")
    grammar = Grammar.builtin("python")
    bounded = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=False,
                              max_parser_states=400).compile(grammar)
    reference = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=False).compile(grammar)
    sources = [textwrap.dedent(inspect.getsource(function)) for function in
               (textwrap.dedent, textwrap.indent, textwrap.TextWrapper._split, textwrap.shorten)]
    classified = 0
    for source in sources:
        token_ids = encode("smollm2", source)
        assert np.array_equal(masks_of(GrammarMatcher(bounded), token_ids),
                              masks_of(GrammarMatcher(reference), token_ids))
        assert bounded.masks.num_classified >= classified  # type: ignore[union-attr]
        classified = bounded.masks.num_classified  # type: ignore[union-attr]
    GrammarMatcher(bounded)
    assert bounded.generations >= 3
    assert bounded.masks.num_classified == classified  # type: ignore[union-attr]


def test_the_bound_is_checked() -> None:
    vocab = vocabulary("gpt2")

    with pytest.raises(ValueError, match="max_parser_states must be a positive int, got 0"):
        GrammarCompiler(vocab, cache_dir=False, max_parser_states=0)
    compiled = GrammarCompiler(vocab, cache_dir=False, progress=False).compile(Grammar.from_regex("a+"))
    with pytest.raises(ValueError, match="max_states must be a positive int, got 'many'"):
        CompiledGrammar(compiled.grammar, vocab, compiled.artifacts, max_states="many")  # type: ignore[arg-type]
