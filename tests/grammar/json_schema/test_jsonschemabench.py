"""Real-world schemas (the full jsonschemabench corpus): no valid instance is ever refused.

A seeded sample across the subsets: every schema that compiles must accept each of its valid
instances, compact and indented (byte level, through the engine's parser); invalid instances are
counted, and must mostly be rejected. A smaller sample goes token by token through the Llama-3
tokenizer with the compiled grammar and matcher, which must agree with the byte-level verdict.
The full run, with the peers, is ``benchmarks/jsonschema_coverage.py``.
"""

from __future__ import annotations

import json
import random
import warnings
from typing import Any

import pytest

from codemask.engine.matcher import GrammarMatcher
from codemask.engine.recognizer import Recognizer
from codemask.errors import UnsupportedSchemaError
from codemask.grammar.grammar import Grammar
from tests.data_paths import corpus_or_skip
from tests.engine.conftest import compiler, encode

SAMPLE = 40
TOKEN_LEVEL = 6


def sample(count: int, seed: int) -> list[dict[str, Any]]:
    files = sorted(corpus_or_skip("jsonschemabench").glob("*.json"))
    random.Random(seed).shuffle(files)
    out = []
    for path in files:
        case = json.loads(path.read_text())
        case["name"] = path.stem
        if len(json.dumps(case["schema"])) < 20_000:  # the largest schemas are the benchmark's job
            out.append(case)
        if len(out) == count:
            break
    return out


def compile_or_none(schema: Any) -> Grammar | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Grammar.from_json_schema(schema, mode="validate")
    except UnsupportedSchemaError:
        return None


@pytest.mark.slow
def test_valid_instances_are_never_refused() -> None:
    compiled = refused_valid = invalid = rejected = 0
    for case in sample(SAMPLE, seed=0):
        grammar = compile_or_none(case["schema"])
        if grammar is None:
            continue
        compiled += 1
        recognizer = Recognizer(grammar)
        for test in case["tests"]:
            texts = [json.dumps(test["data"], ensure_ascii=False), json.dumps(test["data"], indent=2)]
            verdicts = [recognizer.accepts(text) for text in texts]
            if test["valid"]:
                refused_valid += not all(verdicts)
                assert all(verdicts), (case["name"], texts[0][:200])
            else:
                invalid += 1
                rejected += not any(verdicts)
    assert compiled >= 0.85 * SAMPLE
    assert rejected >= 0.9 * invalid


@pytest.mark.slow
def test_token_by_token_agrees_with_the_byte_level_verdict() -> None:
    checked = 0
    for case in sample(TOKEN_LEVEL, seed=1):
        grammar = compile_or_none(case["schema"])
        if grammar is None:
            continue
        recognizer = Recognizer(grammar)
        compiled = compiler("llama3").compile(grammar)
        for test in case["tests"]:
            text = json.dumps(test["data"], ensure_ascii=False)
            matcher = GrammarMatcher(compiled)
            ids = encode("llama3", text)
            accepted = all(matcher.is_token_allowed(t) and matcher.accept_token(t) for t in ids)
            accepted = accepted and matcher.accept_token(compiled.vocab.eos_token_id)
            assert accepted == recognizer.accepts(text), (case["name"], text[:200])
            assert not test["valid"] or accepted
            checked += 1
    assert checked >= 5
