"""Sample code that a lexer-mode grammar's masks are precomputed on at compile time.

A lexer-mode grammar's masks rest on per-lexer-state classifications of the vocabulary and on
splits of residual sets (`lexer_masks`), met for the first time at run time: on Python from cold,
those first visits are most of the steps over 1 ms. Which lexer states a file meets at token
boundaries depends on the language and the vocabulary far more than on the file: after tens of
thousands of tokens of other code, a new file meets few new ones. So ``GrammarCompiler(precompute=
True)`` runs sample code of the grammar's language through the grammar at compile time, masks at
every token, as XGrammar classifies every grammar position at compile time; a lexer state the
samples never met is still classified when first needed, so masks are the same either way.

The compiler holds a vocabulary, not a tokenizer, so the samples are tokenized by the vocabulary
itself, longest match first. That is not the tokenizer's BPE, but its tokens are the vocabulary's
and they end where code's tokens usually end, which is what decides the lexer states met.

Samples: for the builtin Python grammar, a tour of the language's syntax (``grammars/samples/
python.txt``: every kind of string, number, parameter list, statement and pattern, written for
this), whole, then the starts of codemask's own modules — real Python that every install has, and
none of it the standard library that `benchmarks/` measure on. The modules are common code; the
tour holds what they rarely use (raw strings with backslashes, positional-only parameters,
``del``, ``match``, tabs), whose lexer states were otherwise first met by some user's mask. The
other builtin code grammars (Go, SQL, C, Java, JavaScript) have a tour alone: on the benchmark's
files (``benchmarks/code_grammars.py --languages L --engines codemask``) their p99 went from
6.3-8.2 ms to 1.2 (Go), 2.9-3.3 (SQL), 2.1 (C), 2.5 (Java) and 4.8 ms (JavaScript), for compiles of
1.2-4.5 s instead of 0.1-1.6 s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from codemask.engine.token_trie import ByteVocabulary
from codemask.grammar.builtin import grammar_dirs
from codemask.grammar.grammar import Grammar

# Tokens of samples run at compile time, at most `PER_FILE` from each module: the starts of many
# files meet more kinds of code than the whole of a few. On the benchmark's four stdlib files with
# Llama-3 (`benchmarks/mask_profile.py --precompute`, runs over a session on a noisy host): mask
# p99 0.9-1.2 ms (17-32 of 2,400 steps over 1 ms) for a compile of 3.3-4.2 s, against 4.1-4.8 ms
# without; whole modules up to the same 40,000 tokens gave 0.9-1.1 ms for 6.3-6.6 s.
SAMPLE_TOKENS = 40_000
PER_FILE = 600

# The longest token tried at each point: code rarely has longer ones, and a longer run of one
# character is covered by shorter tokens.
LONGEST_TOKEN = 16


# Builtin grammars with sample code (`Grammar.builtin_name`): each has a tour of its syntax in
# ``grammars/samples/<name>.txt``; Python also has codemask's own modules.
SAMPLED = frozenset({"python", "go", "sql", "c", "java", "javascript"})


def has_samples(grammar: Grammar) -> bool:
    """Whether ``grammar`` (a builtin one, or its completion twin) has sample code."""
    return grammar.builtin_name in SAMPLED


def tour_text(grammar: Grammar) -> str | None:
    """The tour of ``grammar``'s syntax (``grammars/samples/<name>.txt``), if it has one."""
    if not has_samples(grammar):
        return None
    for folder in grammar_dirs():
        path = folder / "samples" / f"{grammar.builtin_name}.txt"
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return None


def sample_texts(grammar: Grammar) -> list[str]:
    """The sample code for ``grammar``'s language, in a fixed order: its tour, then for Python
    codemask's modules (none where `has_samples` is false; no modules where they are not files, as
    in a zip)."""
    if not has_samples(grammar):
        return []
    tour = tour_text(grammar)
    modules: list[str] = []
    if grammar.builtin_name == "python":
        package = Path(__file__).resolve().parents[1]
        modules = [path.read_text(encoding="utf-8") for path in sorted(package.rglob("*.py"))]
    return ([tour] if tour is not None else []) + modules


def sample_tokens(grammar: Grammar, vocab: ByteVocabulary, budget: int = SAMPLE_TOKENS) -> list[list[int]]:
    """The samples of ``grammar`` tokenized by ``vocab`` (longest match), ``budget`` tokens in all:
    the tour whole, the modules' first `PER_FILE` tokens each."""
    sequences: list[list[int]] = []
    texts = sample_texts(grammar)
    ids = _token_ids(vocab) if texts else {}
    left = budget
    has_tour = tour_text(grammar) is not None
    for index, text in enumerate(texts):
        if left <= 0:
            break
        cap = left if index == 0 and has_tour else min(left, PER_FILE)
        tokens = list(_longest_match(ids, text.encode("utf-8"), cap))
        if tokens:
            sequences.append(tokens)
            left -= len(tokens)
    return sequences


def _longest_match(ids: dict[bytes, int], data: bytes, limit: int) -> Iterator[int]:
    """Tokens of ``data``, each the longest (of at most `LONGEST_TOKEN` bytes) in ``ids`` at that
    point, until ``limit`` tokens or a byte no token starts with."""
    at = 0
    while at < len(data) and limit > 0:
        for length in range(min(LONGEST_TOKEN, len(data) - at), 0, -1):
            found = ids.get(data[at:at + length])
            if found is not None:
                yield found
                at += length
                limit -= 1
                break
        else:
            return


def _token_ids(vocab: ByteVocabulary) -> dict[bytes, int]:
    """Each ordinary token's bytes and its id (the lowest, where tokens share their bytes)."""
    excluded = vocab.special_ids | vocab.stop_token_ids
    ids: dict[bytes, int] = {}
    for token, data in enumerate(vocab.token_bytes):
        if data and token not in excluded and len(data) <= LONGEST_TOKEN:
            ids.setdefault(bytes(data), token)
    return ids
