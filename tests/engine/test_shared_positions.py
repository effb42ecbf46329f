"""Positions shared between grammars (`SharedPositions`): what a grammar takes from the process-wide
cache equals what walking its own automata gives (`PositionClassifier(share=False)`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from codemask import Grammar
from codemask.engine.automaton import build_rtn
from codemask.engine.position_classifier import PositionClassifier
from codemask.engine.shared_positions import MAX_SHARED_STATES, RuleSignatures, SharedPositions
from codemask.engine.token_trie import token_trie
from codemask.grammar.ir import Expr, RuleRef, literal, seq
from tests.engine.conftest import compiler, uncertain_pairs, vocabulary


def test_positions_shared_between_grammars_equal_a_fresh_walk() -> None:
    """Two schemas with the same string and number rules: the second takes those positions from the
    process-wide cache, and they must be exactly what walking its own automata gives."""
    trie = token_trie(vocabulary("llama3"))
    first = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "number"}}}
    second = {"type": "array", "items": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 80}, "score": {"type": "number"}}}, "maxItems": 40}
    for schema in (first, second):
        compiled = compiler("llama3").compile(Grammar.from_json_schema(schema, mode="validate"))
        positions = np.flatnonzero(compiled.artifacts.rtn.scanning)
        shared = SharedPositions.of(trie)
        hits_before = shared.hits
        reused = PositionClassifier(compiled.core, trie, compiled.vocab_size).classify(positions)
        fresh = PositionClassifier(compiled.core, trie, compiled.vocab_size, share=False).classify(positions)
        assert (reused[0] == fresh[0]).all()
        for a, b in zip(reused[1], fresh[1], strict=True):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert uncertain_pairs(trie, a) == uncertain_pairs(trie, b)
    assert shared.hits > hits_before  # the second schema did reuse positions


def test_free_string_positions_are_shared_whatever_follows_the_string() -> None:
    """A free string is one shared rule (`Rule.shared`) whose positions are keyed without the bytes
    that follow it: a string at the root (nothing follows), as an array item (``,``/``]``) and as
    an object value reuse one walk, each filtered to its own followers, and equal a fresh walk."""
    trie = token_trie(vocabulary("llama3"))
    shared = SharedPositions.of(trie)
    shared.clear()
    schemas = [{"type": "string"}, {"type": "array", "items": {"type": "string"}},
               {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}]
    string_rule_hits = 0
    for schema in schemas:
        compiled = compiler("llama3").compile(Grammar.from_json_schema(schema, mode="validate"))
        rtn = compiled.artifacts.rtn
        assert rtn.shared is not None and rtn.shared.sum() == 1  # the free string, never inlined
        in_string = np.flatnonzero(rtn.scanning & rtn.shared[rtn.state_rule])
        hits_before = shared.hits
        reused = PositionClassifier(compiled.core, trie, compiled.vocab_size).classify(in_string)
        string_rule_hits += shared.hits - hits_before
        fresh = PositionClassifier(compiled.core, trie, compiled.vocab_size, share=False).classify(in_string)
        assert (reused[0] == fresh[0]).all()
        for a, b in zip(reused[1], fresh[1], strict=True):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert uncertain_pairs(trie, a) == uncertain_pairs(trie, b)
    assert string_rule_hits > 0  # the later grammars took the string's positions from the first


def test_rule_digests_tell_apart_equal_rules_calling_different_ones() -> None:
    """A rule built in this process is digested by its automaton's compile key (which names its
    callees by index) and its callees' digests: the same body calling different rules gets
    different digests, the same grammar built twice the same ones, and a grammar without keys (as
    read from the disk cache) is digested from its tables instead."""
    def digests(callee_body: Expr) -> list[bytes | None]:
        rtn = build_rtn({"root": seq(RuleRef("a"), literal("x")), "a": callee_body}, "root", 256)
        signatures = RuleSignatures(rtn, rtn.rule_calls(MAX_SHARED_STATES))
        return [signatures[rule] for rule in range(len(rtn.rule_names))]

    p, q = digests(literal("p")), digests(literal("q"))
    assert None not in p
    assert p[0] != q[0] and p[1] != q[1]  # (root's own automaton is the same in both)
    assert digests(literal("p")) == p
    rtn = build_rtn({"root": seq(RuleRef("a"), literal("x")), "a": literal("p")}, "root", 256)
    keyless = replace(rtn)  # (`rule_keys` is not a field a copy or the disk cache carries)
    assert rtn.rule_keys is not None and keyless.rule_keys is None
    from_tables = RuleSignatures(keyless, keyless.rule_calls(MAX_SHARED_STATES))
    assert [from_tables[rule] for rule in range(2)] != p


def test_a_shared_string_is_filtered_once_per_follow_set() -> None:
    """Object values of two schemas are followed by the same bytes: the second takes the first's
    filtered uncertain tokens (`SharedPositions.followed`), the very record, without filtering the
    free string's again; an array item (other followers) gets its own. Both equal a fresh walk
    (`test_free_string_positions_are_shared_whatever_follows_the_string`)."""
    trie = token_trie(vocabulary("llama3"))
    SharedPositions.of(trie).clear()
    schemas = [{"type": "object", "properties": {"a": {"type": "string"}}},
               {"type": "object", "properties": {"b": {"type": "string"}, "c": {"type": "integer"}}},
               {"type": "array", "items": {"type": "string"}}]
    records = []
    for schema in schemas:
        compiled = compiler("llama3").compile(Grammar.from_json_schema(schema, mode="validate"))
        rtn = compiled.artifacts.rtn
        assert rtn.shared is not None
        in_string = np.flatnonzero(rtn.scanning & rtn.shared[rtn.state_rule])
        classifier = PositionClassifier(compiled.core, trie, compiled.vocab_size)
        unfiltered = classifier._walk_any(in_string, None)[1]
        records.append(classifier.classify(in_string)[1])
        filtered_some = [a for a, b in zip(records[-1], unfiltered, strict=True)
                         if a is not None and b is not None and len(a.token_ids) < len(b.token_ids)]
        assert filtered_some  # (a string's residuals that begin with a byte no caller takes)
    value, other_value, item = records
    assert all(a is b for a, b in zip(value, other_value, strict=True))
    assert not any(a is b for a, b in zip(value, item, strict=True) if a is not None)
