"""Soundness of the token masks in both directions, against an independent oracle.

Byte-level grammars (the real GBNF/EBNF grammars of tests/data and our builtins, plus regexes)
are checked with the Earley recognizer of ``tests/oracle.py``, which shares no code with the
engine. Strings come from the oracle's sampler and from real corpora; they are tokenised by real
tokenizers and fed one token at a time:

- every token of a sentence is allowed by the mask and accepted, and EOS is allowed at the end;
- for mutants, each token is allowed (and accepted) exactly when the oracle says the bytes so far
  are still a viable prefix, and EOS exactly when they form a sentence;
- at sampled steps, random tokens the mask allows and random tokens it forbids are checked
  against the oracle (no false acceptance, no false rejection, beyond the tokens in the corpus).
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import numpy as np
import pytest

from codemask import Grammar, GrammarMatcher
from codemask.engine.compiler import CompiledGrammar
from codemask.grammar.ir import GrammarIR, Rule
from tests import oracle
from tests.data_paths import TEST_DATA
from tests.engine.conftest import compiler, encode, vocabulary

ROOT = Path(__file__).resolve().parents[2]
GRAMMARS = TEST_DATA / "grammars"


def _json_documents(limit: int, seed: int) -> list[str]:
    files = sorted((TEST_DATA / "jsonschemabench").glob("*.json"))
    rng = random.Random(seed)
    docs: list[str] = []
    for path in rng.sample(files, 60):
        for test in json.loads(path.read_text())["tests"]:
            if test["valid"]:
                data = test["data"]
                docs.append(json.dumps(data) if rng.random() < 0.5 else json.dumps(data, indent=2))
    docs = [d for d in docs if len(d) < 400]
    return docs[:limit]


def _c_corpus() -> list[str]:
    return [p.read_text().strip() for p in sorted((ROOT / "benchmarks/data/c_subset").glob("*.c"))][:8]


# name -> (grammar source, tokenizers, extra real strings)
CASES: dict[str, tuple[str, tuple[str, ...], list[str]]] = {
    "builtin-json": ("builtin:json", ("llama3", "mistral", "gemma3"), _json_documents(12, 1)),
    "gbnf-json": ("gbnf/llama.cpp/json.gbnf", ("qwen3", "gpt2"),
                  [d for d in _json_documents(30, 2) if d.startswith("{")][:8]),
    "gbnf-json_arr": ("gbnf/llama.cpp/json_arr.gbnf", ("llama3",),
                      [d for d in _json_documents(40, 3) if d.startswith("[")][:5]),
    "gbnf-arithmetic": ("gbnf/llama.cpp/arithmetic.gbnf", ("llama3", "o200k"),
                        ["1+2*(3-4)/5= 1\n", "(12 - 3) * x= y\nab_1/2=3\n", "2*3+4*5=26\n"]),
    "gbnf-chess": ("gbnf/llama.cpp/chess.gbnf", ("cl100k",), ["1. e4 e5 2. Nf3 Nc6 3. Bb5 a6\n"]),
    "gbnf-list": ("gbnf/llama.cpp/list.gbnf", ("llama3",), ["- apples\n- pears\n"]),
    "gbnf-c": ("gbnf/llama.cpp/c.gbnf", ("llama3", "deepseek_v3"), _c_corpus()),
    "xgrammar-json": ("ebnf/xgrammar/builtin_json.ebnf", ("llama3",),
                      [d for d in _json_documents(30, 4) if d[0] in "{["][:8]),
    "vllm-sql": ("gbnf/llguidance/vllm-sql.gbnf", ("qwen3",), []),
}


def _without_lookaheads(ir: GrammarIR) -> GrammarIR:
    """The engine treats lookahead assertions as hints, as XGrammar's own matcher does."""
    rules = {name: Rule(name, rule.body) for name, rule in ir.rules.items()}
    return GrammarIR(rules=rules, start=ir.start, terminals=ir.terminals, ignore=ir.ignore)


@functools.cache
def grammar(source: str) -> Grammar:
    if source.startswith("builtin:"):
        return Grammar.builtin(source.removeprefix("builtin:"))
    return Grammar.from_file(GRAMMARS / source)


@functools.cache
def oracle_ir(source: str) -> GrammarIR:
    return _without_lookaheads(grammar(source).ir)


@functools.cache
def compiled(source: str, tokenizer_name: str) -> CompiledGrammar:
    return compiler(tokenizer_name).compile(grammar(source))


def mask_bits(matcher: GrammarMatcher, vocab_size: int) -> np.ndarray:
    words = matcher.next_token_bitmask()
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_size].astype(bool)


def mutate(text: str, rng: random.Random) -> str:
    chars = list(text)
    pool = ' \n{}[]",:0123456789abe-+.*()\\/;=#é'
    for _ in range(rng.randint(1, 2)):
        i = rng.randrange(len(chars) + 1)
        action = rng.choice(("insert", "delete", "replace"))
        if action == "insert" or not chars:
            chars.insert(i, rng.choice(pool))
        elif action == "delete":
            del chars[min(i, len(chars) - 1)]
        else:
            chars[min(i, len(chars) - 1)] = rng.choice(pool)
    return "".join(chars)


def check_string(source: str, tokenizer_name: str, text: str, rng: random.Random, probe: bool) -> None:
    """Feed ``text``; every decision must match the oracle (see module docstring)."""
    ir = oracle_ir(source)
    vocab = vocabulary(tokenizer_name)
    matcher = GrammarMatcher(compiled(source, tokenizer_name))
    prefix = b""
    for step, token_id in enumerate(encode(tokenizer_name, text)):
        if probe and step % 7 == 3:
            probe_mask(matcher, ir, prefix, tokenizer_name, rng)
        data = vocab.token_bytes[token_id]
        viable = oracle.is_viable_prefix(ir, prefix + data)
        assert matcher.is_token_allowed(token_id) == viable, (text, prefix, data)
        assert matcher.accept_token(token_id) == viable, (text, prefix, data)
        if not viable:
            return
        prefix += data
    complete = oracle.accepts(ir, prefix)
    assert matcher.is_token_allowed(vocab.eos_token_id) == complete, (text, "EOS")
    assert matcher.can_terminate() == complete


def probe_mask(matcher: GrammarMatcher, ir: GrammarIR, prefix: bytes, tokenizer_name: str, rng: random.Random) -> None:
    """Random allowed and forbidden tokens, checked against the oracle."""
    vocab = vocabulary(tokenizer_name)
    bits = mask_bits(matcher, vocab.vocab_size)
    usable = np.array([bool(b) for b in vocab.token_bytes], dtype=bool)[: vocab.vocab_size]
    allowed = np.flatnonzero(bits & usable)
    forbidden = np.flatnonzero(~bits & usable)
    picks = list(rng.sample(allowed.tolist(), min(12, len(allowed))))
    picks += rng.sample(forbidden.tolist(), min(12, len(forbidden)))
    # forbidden tokens that share a first byte with an allowed one are the interesting ones
    first_bytes = {vocab.token_bytes[t][:1] for t in allowed.tolist()[:2000]}
    near = [t for t in forbidden.tolist() if vocab.token_bytes[t][:1] in first_bytes]
    picks += rng.sample(near, min(12, len(near)))
    for token_id in picks:
        expected = oracle.is_viable_prefix(ir, prefix + vocab.token_bytes[token_id])
        assert bool(bits[token_id]) == expected, (prefix, vocab.token_bytes[token_id])


@pytest.mark.parametrize(
    ("name", "tokenizer_name"),
    [(name, tok) for name, (_src, toks, _corpus) in CASES.items() for tok in toks],
)
def test_masks_match_the_oracle(name: str, tokenizer_name: str) -> None:
    source, _toks, corpus = CASES[name]
    rng = random.Random(f"{name}/{tokenizer_name}")
    ir = oracle_ir(source)
    sentences = [oracle.sample(ir, rng, max_depth=6).decode("utf-8", "replace") for _ in range(8)]
    sentences = [s for s in sentences if oracle.accepts(ir, s.encode()) and len(s) < 300]
    real = [text for text in corpus if oracle.accepts(ir, text.encode())]  # the grammar may be a subset
    assert len(real) >= len(corpus) // 3, "the corpus no longer exercises this grammar"
    positives = sentences + real
    assert len(positives) >= 3
    for text in positives:
        check_string(source, tokenizer_name, text, rng, probe=True)
    for text in positives:
        for _ in range(3):
            check_string(source, tokenizer_name, mutate(text, rng), rng, probe=False)


REGEXES = [
    r"[a-z]+@[a-z]+\.(com|org)",
    r"\d{4}-\d{2}-\d{2}",
    r"(\+|-)?\d+(\.\d+)?([eE][+-]?\d+)?",
    r"[A-Z][a-z]*( [A-Z][a-z]*){0,3}",
    r"(ab|a)*c?",
    r"\w+\s*=\s*\"[^\"]*\"",
    r"[^\n]{0,12}\n",
    r"(0|[1-9][0-9]*)(,[0-9]{3})*",
]


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_masks_match_the_oracle(pattern: str) -> None:
    import re

    rng = random.Random(pattern)
    source_grammar = Grammar.from_regex(pattern)
    compiled_grammar = compiler("llama3").compile(source_grammar)
    ir = source_grammar.ir
    vocab = vocabulary("llama3")
    strings = [oracle.sample(ir, rng, max_depth=6).decode() for _ in range(6)]
    strings += [mutate(s, rng) for s in strings]
    for text in strings:
        matcher = GrammarMatcher(compiled_grammar)
        prefix = b""
        for token_id in encode("llama3", text):
            data = vocab.token_bytes[token_id]
            viable = oracle.is_viable_prefix(ir, prefix + data)
            assert matcher.accept_token(token_id) == viable
            if not viable:
                break
            prefix += data
        else:
            assert matcher.can_terminate() == (re.fullmatch(pattern, text) is not None)
