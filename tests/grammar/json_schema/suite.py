"""Reading the official JSON Schema Test Suite and scoring codemask's schema grammars against it.

A test group (one schema with its instances) passes when the schema compiles and every ``valid``
instance is accepted and every invalid one rejected, each serialised compactly and indented.
Shared by the tests and by ``python -m tests.grammar.json_schema.suite``, which prints the per-keyword
table of the JSON Schema guide (``docs/guides/json-schema.md``) from the full Test Suite (``CODEMASK_DATA``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemask.engine.recognizer import Recognizer
from codemask.errors import CodemaskError, UnsupportedSchemaError
from codemask.grammar.grammar import Grammar

DRAFTS = {"draft2020-12": "https://json-schema.org/draft/2020-12/schema",
          "draft7": "http://json-schema.org/draft-07/schema#"}
EXCLUDED = {"format", "refRemote", "vocabulary"}
"""Files the targets leave aside: format assertions are optional, remote refs need a network."""


@dataclass
class Group:
    draft: str
    keyword: str  # the file's stem
    description: str
    schema: Any
    tests: list[dict[str, Any]]

    @property
    def name(self) -> str:
        return f"{self.draft}/{self.keyword}: {self.description}"


@dataclass
class Outcome:
    group: Group
    status: str  # passed | refused | wrong
    detail: str = ""


def groups(draft: str, suite: Path) -> Iterator[Group]:
    """The required test groups of one draft (not ``optional/``) in ``suite``, excluded files aside.

    ``suite`` holds a folder per draft: the Test Suite's ``tests/``, or the sample in ``tests/data``."""
    for path in sorted((suite / draft).glob("*.json")):
        if path.stem in EXCLUDED:
            continue
        for raw in json.loads(path.read_text()):
            schema = raw["schema"]
            if isinstance(schema, dict) and "$schema" not in schema:
                schema = {"$schema": DRAFTS[draft], **schema}
            yield Group(draft, path.stem, raw["description"], schema, raw["tests"])


def spellings(value: Any) -> list[str]:
    return [json.dumps(value, separators=(",", ":"), ensure_ascii=False), json.dumps(value, indent=2)]


def run_group(group: Group) -> Outcome:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            recognizer = Recognizer(Grammar.from_json_schema(group.schema, mode="validate"))
    except UnsupportedSchemaError as exc:
        return Outcome(group, "refused", str(exc))
    except CodemaskError as exc:
        if all(not t["valid"] for t in group.tests):
            return Outcome(group, "passed", f"rejects everything: {exc}")
        return Outcome(group, "wrong", f"error: {exc}")
    for test in group.tests:
        for text in spellings(test["data"]):
            if recognizer.accepts(text) != test["valid"]:
                verdict = "rejected a valid" if test["valid"] else "accepted an invalid"
                return Outcome(group, "wrong", f"{verdict} instance ({test['description']}): {text[:80]}")
    return Outcome(group, "passed")


def keyword_table(suite: Path, drafts: tuple[str, ...] = ("draft2020-12", "draft7")) -> str:
    """A markdown table of test-group pass rates per keyword file, for the JSON Schema guide."""
    rows: dict[str, dict[str, tuple[int, int]]] = {}
    for draft in drafts:
        for outcome in map(run_group, groups(draft, suite)):
            passed, total = rows.setdefault(outcome.group.keyword, {}).get(draft, (0, 0))
            rows[outcome.group.keyword][draft] = (passed + (outcome.status == "passed"), total + 1)
    lines = ["| keyword | " + " | ".join(drafts) + " |", "|---|" + "---:|" * len(drafts)]
    totals = {d: [0, 0] for d in drafts}
    for keyword in sorted(rows):
        cells = []
        for draft in drafts:
            passed, total = rows[keyword].get(draft, (0, 0))
            totals[draft][0] += passed
            totals[draft][1] += total
            cells.append(f"{passed}/{total}" if total else "–")
        lines.append(f"| {keyword} | " + " | ".join(cells) + " |")
    summary = [f"**{p}/{t} ({p / t:.1%})**" for p, t in totals.values()]
    lines.append("| **all** | " + " | ".join(summary) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    from tests.data_paths import corpus

    print(keyword_table(corpus("json-schema-test-suite") / "tests"))
