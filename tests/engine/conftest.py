"""Shared fixtures for engine tests: real tokenizers' vocabularies, compiled once per session."""

from __future__ import annotations

import functools

from codemask import Grammar, GrammarCompiler, Vocabulary, assets
from codemask.engine.compiler import CompiledGrammar
from codemask.engine.token_trie import TokenTrie
from codemask.engine.uncertain import Uncertain


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


def residual_bytes(trie: TokenTrie, unc: Uncertain, index: int) -> bytes:
    """The bytes of residual ``index`` of ``unc`` (a tail of a row of the trie's byte matrix)."""
    start = int(unc.residual_starts[index])
    return bytes(trie.matrix[unc.residual_rows[index], start : start + int(unc.residual_len[index])])


def uncertain_pairs(trie: TokenTrie, unc: Uncertain) -> set[tuple[int, bytes]]:
    """(token, residual bytes) of every uncertain token of ``unc``."""
    return {(t, residual_bytes(trie, unc, r)) for t, r in zip(unc.token_ids.tolist(), unc.residual_of.tolist(),
                                                               strict=True)}
