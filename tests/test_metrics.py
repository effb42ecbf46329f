"""CodeRepetEval's metrics on hand-checked outputs and on the dataset's own looping samples."""

from __future__ import annotations

import json

import pytest

from codemask import metrics
from tests.data_paths import corpus_or_skip

CODEREPETEVAL = "coderepeteval/CodeGenerationBenchmarks.jsonl"  # a full corpus (tests/data_paths.py)


def test_tr_n_counts_n_grams_seen_before() -> None:
    assert metrics.tr_n("abcabc", 2) == pytest.approx(2 / 5)  # ab bc ca ab* bc*
    assert metrics.tr_n("abcd", 2) == 0.0
    assert metrics.tr_n("aaaaa", 4) == pytest.approx(1 / 2)  # aaaa aaaa*
    assert metrics.tr_n("abc", 4) == 0.0  # no 4-gram at all
    with pytest.raises(ValueError):
        metrics.tr_n("abc", 0)


def test_tr_s_counts_repeated_lines() -> None:
    assert metrics.tr_s("a = 1\nb = 2\na = 1  \n") == pytest.approx(1 / 3)  # trailing spaces ignored
    assert metrics.tr_s("x\n\n\n\n") == pytest.approx(2 / 4)  # blank lines repeat too
    assert metrics.tr_s("") == 0.0


def test_grammar_tokens_and_units() -> None:
    code = 'x = f(1)  # note\nprint("a b")\n'
    assert metrics.grammar_tokens(code) == ["x", "=", "f", "(", "1", ")", "# note", "print", "(", '"a b"', ")"]
    assert metrics.unit_labels(code) == ["expression_statement:assignment", "comment", "expression_statement:call"]
    assert metrics.unit_labels("package main\nfunc f() {}\n", "go") == ["package_clause", "function_declaration"]


def test_code_part_stops_at_the_first_fence_line() -> None:
    answer = "    return a + b\n```\n\nThis function adds two numbers.\n"
    assert metrics.code_part(answer) == "    return a + b\n"
    assert metrics.compiles("def add(a, b):\n" + metrics.code_part(answer))
    assert not metrics.compiles("def add(a, b):\n" + answer)
    assert metrics.code_part("x = 1\n  ```python\ny = 2\n") == "x = 1\n"
    assert metrics.code_part('s = "```"\n') == 's = "```"\n'  # a fence inside a line is code
    assert metrics.code_part("x = 1") == "x = 1"


def test_egp_and_ccp() -> None:
    assert metrics.egp(["stop", "length", "grammar_end", "length"]) == 0.5
    assert metrics.egp([]) == 0.0
    assert metrics.ccp(["def f():\n    return 1\n", "def f(:\n", "x = (1,\n"]) == pytest.approx(1 / 3)
    assert metrics.compiles("package main\nfunc f() {}\n", "go")
    assert not metrics.compiles("package main\nfunc f() {\n", "go")
    assert metrics.mean([0.5, 1.0]) == 0.75


def test_the_dataset_samples_repeat_more_than_their_prompts() -> None:
    rows = [json.loads(line) for line in corpus_or_skip(CODEREPETEVAL).read_text().splitlines()[:40]]
    sample_tr_s = metrics.mean(metrics.tr_s(r["samples"][0]) for r in rows)
    prompt_tr_s = metrics.mean(metrics.tr_s(r["prompt"]) for r in rows)
    assert sample_tr_s > 0.5 and sample_tr_s > prompt_tr_s + 0.15  # greedy outputs that loop, by construction
    assert metrics.egp("stop" if r["eos"] else "length" for r in rows) < 0.1
