"""Bounded strings classified once and filtered by length (`codemask.engine.string_chains`).

The per-token character count is checked against Python's own JSON string scanner on whole
vocabularies, C against Python; a rule is taken for a bounded string only when it is one; and every
position of a bounded string, filtered from its reference, must equal a walk of that position.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from codemask import CompiledGrammar, Grammar, GrammarCompiler, GrammarMatcher
from codemask.engine import native
from codemask.engine.position_classifier import PositionClassifier
from codemask.engine.shared_positions import SharedPositions
from codemask.engine.string_chains import (
    CharCounts,
    StringChain,
    StringChains,
    _json_chars,
    bounded_chain,
    free_string_rtn,
    json_char_ends,
    json_string_chars,
    string_chain,
)
from codemask.engine.token_trie import token_trie
from tests.engine.conftest import encode, vocabulary
from tests.engine.test_native import uncertain_pairs


def compiled_schema(tokenizer: str, schema: Any) -> CompiledGrammar:
    return GrammarCompiler(vocabulary(tokenizer), cache_dir=False, progress=False).compile(
        Grammar.from_json_schema(schema, mode="validate"))


@pytest.mark.parametrize("tokenizer", ["llama3", "qwen3"])
def test_char_counts_equal_python_json_scanner(tokenizer: str) -> None:
    """For every token that is complete string content up to its first closing quote (or its
    end), the count is the length of what `json.decoder.scanstring` decodes; C equals Python on all."""
    trie = token_trie(vocabulary(tokenizer))
    counts = json_string_chars(trie)
    with native.using(False):
        assert np.array_equal(json_string_chars(trie), counts)
    closes, counts = counts & 1, counts >> 1
    checked = 0
    for row, length in enumerate(trie.lengths.tolist()):
        token = bytes(trie.matrix[row, :length])
        try:
            text = token.decode("utf-8")
            decoded, _end = json.decoder.scanstring(  # type: ignore[attr-defined]
                text if '"' in text else text + '"', 0)
        except (UnicodeDecodeError, ValueError):
            continue  # (not complete content: an unfinished escape or character, a control byte)
        assert counts[row] == len(decoded), token
        assert closes[row] == ('"' in text), token
        checked += 1
    assert checked > 0.9 * trie.num_tokens


@pytest.mark.parametrize(("token", "count", "closes"), [
    (b"abc", 3, 0), (b'ab"cd', 2, 1), (b'\\"x"', 2, 1), (b"\\", 1, 0), (b"\\u00", 1, 0), (b"a\\u00e9b", 3, 0),
    (b"\\ud83d\\ude00", 1, 0), (b"\\ud83d\\u", 1, 0), (b"\\ud83d", 1, 0), (b"\\u0041\\u0042", 2, 0),
    ("é".encode()[:1], 1, 0), ("日本".encode()[:4], 2, 0), (b'"', 0, 1), (b"\\\\\"", 1, 1),
])
def test_char_counts_of_unfinished_characters(token: bytes, count: int, closes: int) -> None:
    """An escape, a surrogate pair or a UTF-8 character counts one as soon as it begins."""
    assert _json_chars(token)[0] == 2 * count + closes


@pytest.mark.parametrize("chars", [0, 1, 3, 8])
def test_char_ends_split_tokens_where_python_decoding_does(chars: int) -> None:
    """Where a token's content goes on past ``chars`` characters: in C as in Python on a whole
    vocabulary, and, for tokens of plain UTF-8 (no escape), where the first ``chars`` decoded
    characters end, or the closing quote after exactly that many."""
    trie = token_trie(vocabulary("llama3"))
    rows = np.arange(trie.num_tokens, dtype=np.int64)
    ends = json_char_ends(trie, rows, chars)
    with native.using(False):
        assert np.array_equal(json_char_ends(trie, rows, chars), ends)
    checked = 0
    for row, length in enumerate(trie.lengths.tolist()):
        token = bytes(trie.matrix[row, :length])
        if b"\\" in token:
            continue
        try:
            content = token.decode("utf-8").split('"')[0]
        except UnicodeDecodeError:
            continue
        closes = b'"' in token
        expected = len(content[:chars].encode()) if len(content) > chars or (closes and len(content) == chars) else -1
        assert ends[row] == expected, token
        checked += expected >= 0
    assert checked > 1000


def string_rules(tokenizer: str, schema: Any) -> dict[str, Any]:
    """Per shared rule of the schema's grammar, `string_chain` from the state after its opening quote."""
    rtn = compiled_schema(tokenizer, schema).core.rtn
    has_calls = np.diff(rtn.call_table[0]) > 0
    return {name: string_chain(rtn, int(rtn.trans[rtn.rule_start[rule], ord('"')]), has_calls)
            for rule, name in enumerate(rtn.rule_names) if rtn.is_shared(rule)}


def test_string_chain_is_found_for_bounded_strings_only() -> None:
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "minLength": 2, "maxLength": 9}, "b": {"type": "string", "maxLength": 100},
        "c": {"type": "string"}, "d": {"type": "string", "pattern": "^[a-z]{1,40}$"},
        "e": {"enum": ["abc", "abd"]}, "f": {"type": "string", "format": "date"},
        "g": {"type": "string", "minLength": 12}, "h": {"type": "string", "maxLength": 300}}}
    chains = string_rules("llama3", schema)
    found = sorted((c.min_length, c.max_length, c.closing) for c in chains.values() if c is not None)
    assert found == [(0, 100, True), (2, 9, True)]  # (h counts its characters: its chain is its last ones)
    assert sum(c is None for c in chains.values()) >= 3  # the free string, minLength 12, maxLength 300


def test_bounded_chain_in_c_equals_python() -> None:
    """The C comparison of an automaton with a counted free string against the Python one, from every
    position of strings of several bounds (chains, counted strings, patterns), true and false."""
    schema = {"type": "array", "prefixItems": [
        {"type": "string", "minLength": 2, "maxLength": 9}, {"type": "string", "maxLength": 300},
        {"type": "string", "pattern": "^[a-z]{1,40}$"}, {"type": "string", "minLength": 12}]}
    rtn = compiled_schema("llama3", schema).core.rtn
    has_calls = np.diff(rtn.call_table[0]) > 0
    free, content = free_string_rtn(rtn.trans.shape[1])
    outcomes = []
    for rule in range(len(rtn.rule_names)):
        lo, hi = np.searchsorted(rtn.state_rule, [rule, rule + 1]).tolist()
        for state in range(lo, hi, 7):
            for low, high, closing in ((0, 3, True), (0, 7, True), (2, 7, True), (0, 43, True), (64, 64, False),
                                       (17, 17, False)):
                chain = StringChain(low, high, closing, ())
                with native.using(False):
                    expected = bounded_chain(rtn, has_calls, lo, hi, state, free, content, chain)
                assert bounded_chain(rtn, has_calls, lo, hi, state, free, content, chain) == expected
                outcomes.append((closing, expected))
    assert {(True, True), (True, False), (False, True), (False, False)} <= set(outcomes)


BOUNDS = [(0, 1), (0, 12), (1, 36), (5, 63), (3, 3), (0, 128), (1, 300)]


@pytest.mark.parametrize("tokenizer", ["llama3", "qwen3"])
@pytest.mark.parametrize(("low", "high"), BOUNDS)
def test_filtered_positions_equal_their_walks(tokenizer: str, low: int, high: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Every character position of a bounded string, before and past ``minLength``: the free
    string's classification filtered by length equals the walk of the position itself (accepted
    tokens, uncertain tokens with their residuals), and none of the grammar's positions is walked."""
    schema = {"type": "array", "items": {"type": "string", "minLength": low, "maxLength": high}}
    compiled = compiled_schema(tokenizer, schema)
    rtn, trie = compiled.core.rtn, token_trie(vocabulary(tokenizer))
    chains = StringChains(rtn)
    heads = [p for p in np.flatnonzero(rtn.scanning).tolist() if chains.span(p) is not None]
    spans = [chains.span(p) for p in heads]
    if high <= 128:
        expected = [(max(0, low - k), high - k, True) for k in range(high + 1)]
        assert [(s.low, s.high, s.closing) for s in spans if s is not None] == expected
    else:  # counted: the chain of its last characters, and the blocks of the counting rules
        assert {s.high for s in spans if s is not None and not s.closing} == set(range(1, 65))
        assert min(s.high for s in spans if s is not None and s.closing) == 0
    SharedPositions.of(trie).clear()
    CharCounts.of(trie, compiled.vocab_size).reference = None
    classifier = PositionClassifier(compiled.core, trie, compiled.vocab_size)
    walker = PositionClassifier(compiled.core, trie, compiled.vocab_size, share=False)
    walks: list[list[int]] = []
    walk = classifier._walk_any

    def counted_walk(positions: np.ndarray, progress: str | None) -> Any:
        walks.append(positions.tolist())
        return walk(positions, progress)

    monkeypatch.setattr(classifier, "_walk_any", counted_walk)
    filtered_rows, filtered_unc = classifier.classify(np.array(heads, dtype=np.int64))
    assert walks == []
    walked_rows, walked_unc = walker._walk_any(np.array(heads, dtype=np.int64), None)
    walked_unc = [walker._followed(p, u) for p, u in zip(heads, walked_unc, strict=True)]
    for k, (position, span) in enumerate(zip(heads, spans, strict=True)):
        assert np.array_equal(filtered_rows[k], walked_rows[k]), (position, k)
        filtered, walked = filtered_unc[k], walked_unc[k]
        if span is not None and not span.closing:
            assert_block_exits(trie, vocabulary(tokenizer).token_bytes, filtered, walked)
        else:
            assert uncertain_pairs(trie, filtered) == uncertain_pairs(trie, walked), (position, k)
    assert walked_rows[0].any() and not np.array_equal(walked_rows[0], walked_rows[-1])


def assert_block_exits(trie: Any, token_bytes: list[bytes], filtered: Any, walked: Any) -> None:
    """A block's exits, filtered against walked: the same, but for tokens that are no string's content
    (a caller inside the string refuses their residual: the walk lists them, the filter need not),
    and both unlisted where there are too many."""
    if (filtered is not None and filtered.direct) or (walked is not None and walked.direct):
        assert filtered is not None and filtered.direct and walked is not None and walked.direct
        return
    mine, theirs = uncertain_pairs(trie, filtered), uncertain_pairs(trie, walked)
    assert mine <= theirs
    for token, residual in theirs - mine:
        with pytest.raises((UnicodeDecodeError, ValueError)):
            json.decoder.scanstring(token_bytes[token].decode("utf-8") + '"', 0)  # type: ignore[attr-defined]
        assert residual


def test_generation_masks_along_a_bounded_string_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Masks along real text with escapes and non-ASCII characters in a bounded string: filtered
    (the default) against every position walked."""
    schema = {"type": "object", "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 40}},
              "required": ["id"]}
    text = json.dumps({"id": "héllo wörld \\\"quoted\\\" 🙂 日本語 and more"}, ensure_ascii=False)
    tokens = encode("llama3", text)
    rows = []
    for derive in (True, False):
        SharedPositions.of(token_trie(vocabulary("llama3"))).clear()
        compiled = compiled_schema("llama3", schema)
        if not derive:
            monkeypatch.setattr(StringChains, "span", lambda self, position: None)
        matcher = GrammarMatcher(compiled)
        masks = []
        for token in tokens:
            masks.append(matcher.next_token_bitmask().copy())
            assert matcher.accept_token(token)
        rows.append(np.stack(masks))
    assert np.array_equal(rows[0], rows[1])


def test_c_functions_refuse_bad_input() -> None:
    """Out-of-range rows, lengths, states and bounds raise `ValueError` naming the function, not a
    read past an array."""
    trie = token_trie(vocabulary("llama3"))
    with pytest.raises(ValueError, match="json_char_ends: a row"):
        native.json_char_ends(trie.matrix, trie.lengths, np.array([trie.num_tokens], dtype=np.int64), 2)
    with pytest.raises(ValueError, match=r"json_char_ends: .*negative"):
        native.json_char_ends(trie.matrix, trie.lengths, np.array([0], dtype=np.int64), -1)
    with pytest.raises(ValueError, match="json_string_chars: a length"):
        native.json_string_chars(trie.matrix, np.full(trie.num_tokens, trie.matrix.shape[1] + 1, dtype=np.int32))
    rtn = compiled_schema("llama3", {"type": "string", "maxLength": 5}).core.rtn
    free, content = free_string_rtn(rtn.trans.shape[1])
    has_calls = np.diff(rtn.call_table[0]) > 0
    args = (rtn.trans, rtn.accepting, has_calls, 0, rtn.num_states)
    with pytest.raises(ValueError, match="bounded_chain: a state or a bound"):
        native.bounded_chain(*args, rtn.num_states, free.trans, free.accepting, content, 0, 5, True)
    with pytest.raises(ValueError, match="bounded_chain: a state or a bound"):
        native.bounded_chain(*args, 0, free.trans, free.accepting, content, 6, 5, True)
    with pytest.raises(ValueError, match="has_calls: expected"):
        native.bounded_chain(rtn.trans, rtn.accepting, has_calls[:-1], 0, rtn.num_states, 0, free.trans,
                             free.accepting, content, 0, 5, True)
