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
other builtin code grammars (Go, SQL, C, Java, JavaScript) have a tour alone. A tour costs compile
time (seconds, once: the disk cache keeps what it learnt) and takes the p99 of a mask on real files
from several milliseconds to about one (the code completion guide, ``docs/guides/code-completion.md``,
has the figures; ``benchmarks/mask_profile.py --paths`` times any files).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from codemask.engine.token_trie import ByteVocabulary
from codemask.grammar.builtin import grammar_dirs
from codemask.grammar.grammar import Grammar

# Tokens of samples run at compile time, at most `PER_FILE` from each of codemask's modules (the
# tour runs whole): the starts of many files meet more kinds of code than the whole of a few. On the
# benchmark's four stdlib files with Llama-3 (`benchmarks/mask_profile.py --precompute`): mask p99
# 0.7 ms (8-11 of 2,400 steps over 1 ms) for a compile of 4.5-4.6 s, against 4.1-4.8 ms without;
# before the tour, whole modules up to the same 40,000 tokens gave 0.9-1.1 ms for 6.3-6.6 s, and
# 80,000 tokens (1,200 a module) no better than 40,000 for a 7 s compile.
SAMPLE_TOKENS = 40_000
PER_FILE = 600

# The longest token tried at each point: code rarely has longer ones, and a longer run of one
# character is covered by shorter tokens.
LONGEST_TOKEN = 16

# Where the tours lie, in each grammar folder (`grammar_dirs`): ``<builtin name>.txt``.
TOURS = "samples"


def tour_text(grammar: Grammar) -> str | None:
    """The tour of ``grammar``'s syntax (``grammars/samples/<name>.txt``) for a builtin grammar
    (or its completion twin) that has one."""
    if grammar.builtin_name is None:
        return None
    for folder in grammar_dirs():
        path = folder / TOURS / f"{grammar.builtin_name}.txt"
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return None


def has_samples(grammar: Grammar) -> bool:
    """Whether ``grammar`` has sample code: every builtin grammar with a tour."""
    return tour_text(grammar) is not None


def toured() -> list[str]:
    """The builtin grammars that have a tour."""
    return sorted({path.stem for folder in grammar_dirs() for path in (folder / TOURS).glob("*.txt")})


def _modules(grammar: Grammar) -> list[str]:
    """codemask's own modules, for the builtin Python grammar (none where they are not files, as
    in a zip)."""
    if grammar.builtin_name != "python":
        return []
    package = Path(__file__).resolve().parents[1]
    return [path.read_text(encoding="utf-8") for path in sorted(package.rglob("*.py"))]


def _texts(grammar: Grammar) -> list[tuple[str, int | None]]:
    """The sample texts in their fixed order, each with the most tokens taken of it (None: all)."""
    tour = tour_text(grammar)
    if tour is None:
        return []
    return [(tour, None)] + [(module, PER_FILE) for module in _modules(grammar)]


def sample_texts(grammar: Grammar) -> list[str]:
    """The sample code for ``grammar``'s language: its tour, then for Python codemask's modules."""
    return [text for text, _cap in _texts(grammar)]


def sample_tokens(grammar: Grammar, vocab: ByteVocabulary, budget: int = SAMPLE_TOKENS) -> list[list[int]]:
    """The samples of ``grammar`` tokenized by ``vocab`` (longest match), ``budget`` tokens in all:
    the tour whole, the modules' first `PER_FILE` tokens each."""
    texts = _texts(grammar)
    ids = _token_ids(vocab) if texts else {}
    sequences: list[list[int]] = []
    left = budget
    for text, cap in texts:
        if left <= 0:
            break
        tokens = list(_longest_match(ids, text.encode("utf-8"), left if cap is None else min(left, cap)))
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
