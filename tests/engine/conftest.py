"""Shared fixtures for engine tests: real tokenizers' vocabularies, compiled once per session."""

from __future__ import annotations

import functools

from codemask import Grammar, GrammarCompiler, Vocabulary, assets
from codemask.engine.compiler import CompiledGrammar


@functools.cache
def vocabulary(name: str) -> Vocabulary:
    """The `Vocabulary` of a packaged tokenizer (installed by scripts/setup.sh)."""
    return Vocabulary.from_tokenizer(assets.load_tokenizer(name))


@functools.cache
def tokenizer(name: str):  # type: ignore[no-untyped-def]
    return assets.load_tokenizer(name)


@functools.cache
def compiler(name: str, precompute: bool = False) -> GrammarCompiler:
    """A compiler without the disk cache, so tests exercise compilation itself."""
    return GrammarCompiler(vocabulary(name), cache_dir=False, progress=False, precompute=precompute)


def compile_ebnf(text: str, tokenizer_name: str = "llama3") -> CompiledGrammar:
    return compiler(tokenizer_name).compile(Grammar.from_ebnf(text))


def encode(name: str, text: str) -> list[int]:
    return list(tokenizer(name).encode(text, add_special_tokens=False))
