"""The official JSON Schema Test Suite (draft2020-12 and draft7, required groups).

A group passes when its schema compiles and every valid instance is accepted and every invalid
one rejected, each serialised compactly and indented. Two properties are absolute: a compiled
schema never rejects a valid instance, and nothing crashes. The pass rates are floors that only
go up (``docs/json-schema.md`` has the per-keyword table).
"""

from __future__ import annotations

import pytest

from tests.grammar.json_schema.suite import groups, run_group

PASS_RATE_FLOORS = {"draft2020-12": 0.9, "draft7": 0.97}


@pytest.mark.slow
@pytest.mark.parametrize("draft", sorted(PASS_RATE_FLOORS))
def test_test_suite(draft: str) -> None:
    outcomes = [run_group(group) for group in groups(draft)]
    false_rejections = [o.group.name for o in outcomes if "rejected a valid" in o.detail or "error:" in o.detail]
    assert false_rejections == []
    passed = sum(o.status == "passed" for o in outcomes)
    assert passed / len(outcomes) >= PASS_RATE_FLOORS[draft], f"{passed}/{len(outcomes)}"
