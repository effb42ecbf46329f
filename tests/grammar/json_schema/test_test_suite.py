"""The official JSON Schema Test Suite (draft2020-12 and draft7, required groups).

A group passes when its schema compiles and every valid instance is accepted and every invalid
one rejected, each serialised compactly and indented. Two properties are absolute: a compiled
schema never rejects a valid instance, and nothing crashes. The pass rates over the whole suite are
floors that only go up (the JSON Schema guide has the per-keyword table); the keyword files of the
sample in ``tests/data`` pass whole.
"""

from __future__ import annotations

import pytest

from tests.data_paths import TEST_DATA, corpus_or_skip
from tests.grammar.json_schema.suite import Outcome, groups, run_group

PASS_RATE_FLOORS = {"draft2020-12": 0.9, "draft7": 0.97}


def false_rejections(outcomes: list[Outcome]) -> list[str]:
    return [o.group.name for o in outcomes if "rejected a valid" in o.detail or "error:" in o.detail]


@pytest.mark.parametrize("draft", sorted(PASS_RATE_FLOORS))
def test_every_group_of_the_sample_passes(draft: str) -> None:
    outcomes = [run_group(group) for group in groups(draft, TEST_DATA / "json-schema-test-suite")]
    assert len(outcomes) > 30
    assert [f"{o.group.name}: {o.detail}" for o in outcomes if o.status != "passed"] == []


@pytest.mark.slow
@pytest.mark.parametrize("draft", sorted(PASS_RATE_FLOORS))
def test_test_suite(draft: str) -> None:
    outcomes = [run_group(group) for group in groups(draft, corpus_or_skip("json-schema-test-suite") / "tests")]
    assert false_rejections(outcomes) == []
    passed = sum(o.status == "passed" for o in outcomes)
    assert passed / len(outcomes) >= PASS_RATE_FLOORS[draft], f"{passed}/{len(outcomes)}"
