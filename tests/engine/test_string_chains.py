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
from codemask.engine.automaton import build_rtn
from codemask.engine.position_classifier import PositionClassifier
from codemask.engine.shared_positions import MAX_SHARED_STATES, SharedPositions
from codemask.engine.string_chains import (
    NEVER,
    UNKNOWN,
    CharCounts,
    Span,
    StringChains,
    _json_chars,
    free_string_rtn,
    json_char_ends,
    json_string_chars,
    string_counts,
)
from codemask.engine.token_trie import token_trie
from codemask.grammar.ir import Repeat, RuleRef, choice, literal, seq
from codemask.grammar.json_schema.strings import any_char
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


def first_spans(tokenizer: str, schema: Any) -> dict[str, Span | None]:
    """Per shared rule of the schema's grammar, the `Span` of the state after its opening quote (which
    calls a counting rule first where ``minLength`` is counted)."""
    rtn = compiled_schema(tokenizer, schema).core.rtn
    chains = StringChains(rtn, rtn.rule_calls(MAX_SHARED_STATES))
    shared = [rule for rule in range(len(rtn.rule_names)) if rtn.is_shared(rule)]
    for rule in shared:
        chains._find(rule)
    return {rtn.rule_names[rule]: chains._spans.get(int(rtn.trans[rtn.rule_start[rule], ord('"')])) for rule in shared}


@pytest.mark.parametrize("tokenizer", ["llama3", "qwen3"])
def test_fitting_rows_equal_a_test_of_every_token(tokenizer: str) -> None:
    """`CharCounts.fitting` assembles its row from the rows of the tokens that begin at most so many
    characters: the same bits as testing every token's count, for bounds below, between and past
    the counts tokens have, an empty range, and a block's (no lowest count)."""
    trie = token_trie(vocabulary(tokenizer))
    counts = CharCounts(trie, vocabulary(tokenizer).vocab_size)
    finite = counts.chars[counts.chars < NEVER >> 1]
    assert finite.max() > 16 and counts.closes.any() and not counts.closes.all()
    bounds = [(0, 0), (0, 1), (1, 1), (1, 5), (2, 12), (3, 2), (0, 64), (5, 300), (0, 10**6), (NEVER, 8),
              (NEVER, 64), (-1, -1), (7, int(finite.max())), (int(finite.max()), int(finite.max()) + 1)]
    for low, high in bounds:
        expected = np.packbits(counts._fits(slice(None), low, high), bitorder="little").view(np.uint32)
        assert np.array_equal(counts.fitting(low, high), expected), (low, high)


def test_spans_are_found_for_bounded_strings_only() -> None:
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "minLength": 2, "maxLength": 9}, "b": {"type": "string", "maxLength": 100},
        "c": {"type": "string"}, "d": {"type": "string", "pattern": "^[a-z]{1,40}$"},
        "e": {"enum": ["abc", "abd"]}, "f": {"type": "string", "format": "date"},
        "g": {"type": "string", "minLength": 12}, "h": {"type": "string", "maxLength": 300},
        "i": {"type": "string", "minLength": 100, "maxLength": 1000}}}
    spans = first_spans("llama3", schema)
    found = sorted((s.low, s.high, s.closing) for s in spans.values() if s is not None)
    # (h and i count their characters with calls of counting rules: two levels of them for i)
    assert found == [(0, 100, True), (0, 300, True), (2, 9, True), (100, 1000, True)]
    assert sum(s is None for s in spans.values()) == 2  # the free string and minLength 12 (no bound)


def test_string_counts_in_c_equal_python() -> None:
    """The C pairing of an automaton with the free string, from every 23rd state of every rule
    of strings of several bounds (chains, counted strings of one and two levels, patterns), as
    strings and as blocks, against the Python one: counted and not, both kinds."""
    schema = {"type": "array", "prefixItems": [
        {"type": "string", "minLength": 2, "maxLength": 9}, {"type": "string", "maxLength": 300},
        {"type": "string", "pattern": "^[a-z]{1,40}$"}, {"type": "string", "minLength": 12},
        {"type": "string", "minLength": 100, "maxLength": 1000}]}
    rtn = compiled_schema("llama3", schema).core.rtn
    chains = StringChains(rtn, rtn.rule_calls(MAX_SHARED_STATES))
    for rule in range(len(rtn.rule_names)):
        chains._find(rule)
    lengths = chains._lengths
    assert sorted(lengths[lengths != UNKNOWN].tolist()) == [64, 512]
    outcomes = []
    for state in range(0, rtn.num_states, 23):
        for closing in (True, False):
            with native.using(False):
                expected = string_counts(rtn, state, closing, lengths)
            assert string_counts(rtn, state, closing, lengths) == expected, (state, closing)
            outcomes.append((closing, expected is not None))
    assert {(True, True), (True, False), (False, True), (False, False)} <= set(outcomes)


BOUNDS = [(0, 1), (0, 12), (1, 36), (5, 63), (3, 3), (0, 128), (1, 300), (100, 1000)]


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
    chains = StringChains(rtn, rtn.rule_calls(MAX_SHARED_STATES))
    heads = [p for p in np.flatnonzero(rtn.scanning).tolist() if chains.span(p) is not None]
    spans = [chains.span(p) for p in heads]
    if high <= 128:
        expected = [(max(0, low - k), high - k, True) for k in range(high + 1)]
        assert [(s.low, s.high, s.closing) for s in spans if s is not None] == expected
    else:  # counted: the string's own states (calling blocks), and the blocks' states
        assert {s.high for s in spans if s is not None and not s.closing} >= set(range(1, 65))
        closing = [(s.low, s.high) for s in spans if s is not None and s.closing]
        # (a count is spelled most significant unit first: a block before any character of the rule's own)
        assert max(closing) == (low % 64, high - 64 * (low // 64)) and min(h for _, h in closing) == 0
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


def test_a_bounded_string_is_filtered_once_per_span_and_exits() -> None:
    """`CharCounts.filtered` keeps what it made: the same span and exit bytes (another array of them)
    give the same, read-only, row and record; another span its own; a new reference, new ones
    (each equal to a walk: `test_filtered_positions_equal_their_walks`, which filters through it)."""
    compiled = compiled_schema("llama3", {"type": "array", "items": {"type": "string", "maxLength": 9}})
    trie = token_trie(vocabulary("llama3"))
    PositionClassifier(compiled.core, trie, compiled.vocab_size).prepare()  # (sets the reference)
    counts = CharCounts.of(trie, compiled.vocab_size)
    exits = np.zeros(256, dtype=bool)
    exits[[ord(","), ord("]"), ord(" ")]] = True
    row, unc = counts.filtered(Span(0, 9, True), exits, 16384)
    again_row, again_unc = counts.filtered(Span(0, 9, True), exits.copy(), 16384)
    assert again_row is row and again_unc is unc and not row.flags.writeable
    shorter = counts.filtered(Span(0, 8, True), exits, 16384)[0]
    assert shorter is not row and not np.array_equal(shorter, row)
    assert counts.reference is not None
    counts.set_reference(*counts.reference)
    new_row, new_unc = counts.filtered(Span(0, 9, True), exits, 16384)
    assert new_row is not row and np.array_equal(new_row, row)
    assert uncertain_pairs(trie, new_unc) == uncertain_pairs(trie, unc)


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
    rtn = compiled_schema("llama3", {"type": "string", "maxLength": 300}).core.rtn
    free, content = free_string_rtn(rtn.trans.shape[1])
    call_lo, callee, ret = rtn.call_table
    lengths = np.full(len(rtn.rule_names), 64, dtype=np.int32)
    args = (rtn.trans, rtn.accepting, call_lo, callee, ret)
    with pytest.raises(ValueError, match="string_counts: a state out of range"):
        native.string_counts(*args, lengths, 0, rtn.num_states, rtn.num_states, free.trans, free.accepting, content,
                             True)
    with pytest.raises(ValueError, match="call_lo: expected"):
        native.string_counts(rtn.trans, rtn.accepting, call_lo[:-1], callee, ret, lengths, 0, rtn.num_states, 0,
                             free.trans, free.accepting, content, True)
    string = next(rule for rule in range(len(rtn.rule_names)) if rtn.is_shared(rule))
    lo, hi = rtn.rule_bounds[string], rtn.rule_bounds[string + 1]
    after_quote = int(rtn.trans[rtn.rule_start[string], ord('"')])
    counted = native.string_counts(*args, lengths, lo, hi, after_quote, free.trans, free.accepting, content, True)
    assert counted is not None and counted[2 * (after_quote - lo) + 1] == 300
    # a callee past the lengths given is no block: not counted, and nothing read past the array
    assert native.string_counts(*args, lengths[:0], lo, hi, after_quote, free.trans, free.accepting, content,
                                True) is None


def test_a_state_calling_many_blocks_counts_their_lengths() -> None:
    """A string's state that may call any of eight blocks (one to eight characters) counts one to
    eight characters, in C as in Python (no bound on the calls a state makes)."""
    rules = {f"block{n}": Repeat(any_char(), n, n) for n in range(1, 9)}
    rules["root"] = seq(literal('"'), choice(*(RuleRef(f"block{n}") for n in range(1, 9))), literal('"'))
    rtn = build_rtn(rules, "root", 256)
    root = rtn.rule_names.index("root")
    after_quote = int(rtn.trans[rtn.rule_start[root], ord('"')])
    assert np.diff(rtn.call_table[0])[after_quote] == 8
    chains = StringChains(rtn, rtn.rule_calls(MAX_SHARED_STATES))
    chains._find(root)
    assert chains._spans[after_quote] == Span(1, 8, True)
    with native.using(False):
        expected = string_counts(rtn, after_quote, True, chains._lengths)
    assert expected is not None and expected[after_quote] == (1, 8)
    assert string_counts(rtn, after_quote, True, chains._lengths) == expected
