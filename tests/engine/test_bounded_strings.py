"""Masks inside bounded strings, where the C walk takes whole trie subtrees along chains of characters.

A string of bounded length is a chain of parser states, one per character (a counting rule's unit
past 32 characters). The C walk (`_native_position.c`) accepts a subtree without visiting its nodes
where every token below is well-formed UTF-8 and every character, multi-byte ones included, moves
one state along that chain. Its masks must equal the numpy walk's, which visits every node, and the
precomputed masks, along real instances with non-ASCII text, on real vocabularies; and on a
vocabulary made to hold, under shared prefixes, every kind of ill-formed UTF-8 next to well-formed
characters of each length, every position must be classified as the numpy walk classifies it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest

from codemask import Grammar, GrammarCompiler, GrammarMatcher, Vocabulary
from codemask.engine import native
from codemask.engine.parser import ParserCore
from codemask.engine.position_classifier import PositionClassifier
from codemask.engine.shared_positions import MAX_SHARED_STATES, SharedPositions
from codemask.engine.string_chains import StringChains
from codemask.engine.token_trie import token_trie
from tests.engine.conftest import encode, vocabulary
from tests.engine.test_native import uncertain_pairs
from tests.engine.test_string_chains import assert_block_exits


def string_schema(**bounds: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"_id": {"type": "string", **bounds}}, "required": ["_id"],
            "additionalProperties": False}


# maxLength on both sides of the counting threshold (32), minLength, and a class with a non-ASCII member
SCHEMAS = {
    "max8": string_schema(maxLength=8),
    "max30": string_schema(minLength=1, maxLength=30),
    "max36": string_schema(minLength=1, maxLength=36),
    "max63": string_schema(minLength=5, maxLength=63),
    "max200": string_schema(maxLength=200),
    "pattern": string_schema(pattern="^[a-zé]{1,40}$"),
    "min12": string_schema(minLength=12),
}
TEXTS = ["123456789", "héllo wörld ✓ 日本語", "1234567890abcdefghij1234567890abcdefghij12345678",
         "Ünïcödé — “quotes” \\\"x\\\" 🙂🙂 ok", "日本語のテキストです、かなり長い文字列。" * 3, "héllo", "aéaéaéaéaé"]


def instances(name: str) -> list[str]:
    """The texts that are instances of schema ``name`` (each mask is compared up to the end of
    its instance)."""
    bounds = SCHEMAS[name]["properties"]["_id"]
    if name == "pattern":
        return [t for t in TEXTS if set(t) <= set("abcdefghijklmnopqrstuvwxyzé")]
    return [t for t in TEXTS if bounds.get("minLength", 0) <= len(t) <= bounds.get("maxLength", 10**9)]


@contextlib.contextmanager
def walking(walk: bool) -> Iterator[None]:
    """With ``walk``, every position of a bounded string walked, not filtered from the free string's
    classification (`string_chains`): the chain walks these tests are about."""
    with mock.patch.object(StringChains, "span", lambda self, position: None) if walk else contextlib.nullcontext():
        yield


def masks_along(tokenizer: str, schema: Any, texts: list[str], *, precompute: bool, use_native: bool,
                walk: bool = True) -> np.ndarray:
    """Every mask along every text as the value of the schema's string, positions classified from scratch."""
    SharedPositions.of(token_trie(vocabulary(tokenizer))).clear()
    rows = []
    with native.using(use_native), walking(walk):
        compiled = GrammarCompiler(vocabulary(tokenizer), cache_dir=False, progress=False,
                                   precompute=precompute).compile(Grammar.from_json_schema(schema, mode="validate"))
        for text in texts:
            matcher = GrammarMatcher(compiled)
            for token in [*encode(tokenizer, json.dumps({"_id": text}, ensure_ascii=False)), None]:
                rows.append(matcher.next_token_bitmask().copy())
                if token is not None:
                    assert matcher.accept_token(token), text
    return np.stack(rows)


@pytest.mark.parametrize("tokenizer", ["llama3", "qwen3"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_bounded_string_masks_equal_the_numpy_walk_and_the_precompute(tokenizer: str, name: str) -> None:
    texts = instances(name)
    assert texts and any(not t.isascii() for t in texts)
    lazy = masks_along(tokenizer, SCHEMAS[name], texts, precompute=False, use_native=True)
    walked = masks_along(tokenizer, SCHEMAS[name], texts, precompute=False, use_native=False)
    assert lazy.shape == walked.shape and (lazy == walked).all()
    filtered = masks_along(tokenizer, SCHEMAS[name], texts, precompute=False, use_native=True, walk=False)
    assert (filtered == walked).all()
    if name != "max200":  # (its precompute classifies every position of a 200-character chain: slow, same code)
        assert (lazy == masks_along(tokenizer, SCHEMAS[name], texts, precompute=True, use_native=True)).all()


# Well-formed characters of one to four bytes, the same cut short, and ill-formed sequences: stray
# continuation bytes, overlong forms, a surrogate, a code point past U+10FFFF, bytes never used,
# a lead byte followed by ASCII; then ASCII that a string takes or ends at.
WELL_FORMED = ["a", "Z", "é", "ß", "✓", "日", "語", "🙂", "\U00010000", "\U0010ffff", "\u0800", "\ud7ff"]
CUT = [b"\xc3", b"\xe6\x97", b"\xe6", b"\xf0\x9f", b"\xf0\x9f\x99", b"\xf4\x8f\xbf", b"\xe0\xa0", b"\xed\x9f"]
ILL_FORMED = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80",
              b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xc3a", b"\xe6\x97a",
              b"\xc3\xa9\xa9", b"\xf0\x9f\x99\x82\x80"]
ASCII = [b" ", b"x", b"\"", b"\\", b"\\n", b"1"]


def crafted_vocabulary() -> Vocabulary:
    """Tokens of up to three pieces from the lists above, so that every kind of piece sits in
    subtrees with enough tokens for the bulk test, next to and below well-formed ones."""
    pieces = [c.encode() for c in WELL_FORMED] + CUT + ILL_FORMED + ASCII
    heads = [c.encode() for c in WELL_FORMED[:6]] + [b"\xe6\x97", b"\xc3", b" "]
    tokens = set(pieces)
    for head in heads:
        for piece in pieces:
            tokens.add(head + piece)
            for tail in (b"a", "é".encode(), b"\xe6", b"\x80", "🙂".encode()):
                tokens.add(head + piece + tail)
    ordered = sorted(tokens)
    return Vocabulary([*ordered, b""], eos_token_id=len(ordered))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_ill_formed_tokens_are_classified_as_the_numpy_walk_classifies_them(name: str) -> None:
    vocab = crafted_vocabulary()
    compiled = GrammarCompiler(vocab, cache_dir=False, progress=False).compile(
        Grammar.from_json_schema(SCHEMAS[name], mode="validate"))
    trie = token_trie(vocab)
    positions = np.flatnonzero(compiled.artifacts.rtn.scanning)
    found = []
    for use_native, walk in ((True, True), (False, True), (True, False)):  # (last: bounded strings filtered)
        core = ParserCore(compiled.artifacts.rtn)  # fresh: no transition known yet
        with native.using(use_native), walking(walk):
            found.append(PositionClassifier(core, trie, compiled.vocab_size, share=False).classify(positions))
    (np_accepted, np_uncertain) = found[1]
    assert np_accepted.any()
    chains = StringChains(compiled.artifacts.rtn, compiled.artifacts.rtn.rule_calls(MAX_SHARED_STATES))
    in_block = [(span := chains.span(p)) is not None and not span.closing for p in positions.tolist()]
    for (accepted, uncertain), filtered in ((found[0], False), (found[2], True)):
        assert (accepted == np_accepted).all()
        for a, b, block in zip(uncertain, np_uncertain, in_block, strict=True):
            if filtered and block:  # (a block's filter leaves out tokens that are no string's content)
                assert_block_exits(trie, vocab.token_bytes, a, b)
            else:
                assert uncertain_pairs(trie, a) == uncertain_pairs(trie, b)
    assert any(in_block) == (name == "max200")  # (the only one counted)
