"""``mode="generate"``: what a model may write under a JSON Schema (the default), and strictness.

Generation writes each named key at most once, in the schema's order, every required key, no key the
schema does not declare, and bounded whitespace; a valid document written in that order and with
declared keys only is accepted, and nothing invalid is (checked against ``jsonschema``).
"""

from __future__ import annotations

import datetime
import json
import random
import re
import warnings
from typing import Any

import jsonschema
import pytest

from codemask.engine.recognizer import Recognizer
from codemask.errors import UnsupportedSchemaError
from codemask.grammar.grammar import Grammar
from codemask.grammar.json_schema import strings
from tests.data_paths import corpus_or_skip

KEYS = "abcdefghij"
MANY_REQUIRED = {"type": "object", "properties": {k: {"type": "integer"} for k in KEYS}, "required": list(KEYS[:8])}


def test_each_key_at_most_once_and_in_schema_order() -> None:
    recognizer = Recognizer(Grammar.from_json_schema({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}}}))
    assert recognizer.accepts('{"name": "Ann", "age": 3}')
    assert recognizer.accepts('{"age": 3}') and recognizer.accepts("{}")
    assert not recognizer.accepts('{"name": "Ann", "name": "Bob"}')
    assert not recognizer.accepts('{"name": "Ann", "age": 3, "name": "Bob"}')
    assert not recognizer.accepts('{"age": 3, "name": "Ann"}')  # another order: validation mode takes it
    assert Recognizer(Grammar.from_json_schema({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}}}, mode="validate")).accepts('{"age": 3, "name": "Ann"}')


def test_every_required_key_however_many() -> None:
    recognizer = Recognizer(Grammar.from_json_schema(MANY_REQUIRED))
    every = {k: 1 for k in KEYS[:8]}
    assert recognizer.accepts(json.dumps(every))
    assert recognizer.accepts(json.dumps({**every, "j": 2}))
    for missing in KEYS[:8]:
        assert not recognizer.accepts(json.dumps({k: v for k, v in every.items() if k != missing})), missing


def test_objects_are_closed_unless_the_schema_opens_them() -> None:
    closed = Recognizer(Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}}))
    assert not closed.accepts('{"a": 1, "properties": {}}')  # echoing the schema is not a key it declares
    assert Recognizer(Grammar.from_json_schema({"type": "object"})).accepts("{}")
    assert not Recognizer(Grammar.from_json_schema({"type": "object"})).accepts('{"x": 1}')
    open_map = Recognizer(Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "integer"}},
                                                    "additionalProperties": {"type": "string"}}))
    assert open_map.accepts('{"a": 1, "x": "s", "y": "t"}')
    assert not open_map.accepts('{"x": "s", "a": 1}')  # declared keys first, then the others
    assert not open_map.accepts('{"a": 1, "x": 2}')
    patterns = Recognizer(Grammar.from_json_schema({"type": "object",
                                                    "patternProperties": {"^x-": {"type": "integer"}}}))
    assert patterns.accepts('{"x-a": 1, "x-b": 2}') and not patterns.accepts('{"y": 1}')


def test_whitespace_is_bounded_as_pretty_printers_write_it() -> None:
    recognizer = Recognizer(Grammar.from_json_schema(MANY_REQUIRED))
    every = {k: 1 for k in KEYS[:8]}
    for text in (json.dumps(every), json.dumps(every, indent=2), json.dumps(every, indent=4),
                 json.dumps(every, separators=(",", ":"))):
        assert recognizer.accepts(text)
    assert recognizer.accepts(json.dumps(every, indent=32)) and not recognizer.accepts(json.dumps(every, indent=33))
    assert not recognizer.accepts(json.dumps(every).replace(",", " ,"))  # nothing before a comma
    assert not recognizer.accepts(json.dumps(every).replace(": ", ":\n"))
    assert not recognizer.accepts(json.dumps(every).replace(", ", ",\n\n"))  # one line break per gap
    assert not Recognizer(Grammar.from_json_schema({"type": "array"})).accepts("[   ]")


def test_numbers_are_finite_to_write() -> None:
    recognizer = Recognizer(Grammar.from_json_schema({"type": "number"}))
    assert recognizer.accepts("12345678901234567") and recognizer.accepts("-0.5e-10")
    assert not recognizer.accepts("1" + "0" * 40)
    assert Recognizer(Grammar.from_json_schema({"type": "number"}, mode="validate")).accepts("1" + "0" * 40)


def test_dates_are_calendar_dates() -> None:
    recognizer = Recognizer(Grammar.from_json_schema({"type": "string", "format": "date"}))
    rng = random.Random(0)
    for _ in range(3000):
        text = f"{rng.choice([0, 1, 4, 100, 1900, 2000, 2023, 2024, 9999, rng.randrange(10000)]):04d}-" \
               f"{rng.randrange(0, 14):02d}-{rng.randrange(0, 33):02d}"
        try:
            datetime.date.fromisoformat(text)
            valid = True
        except ValueError:
            valid = False
        assert recognizer.accepts(json.dumps(text)) == valid, text


def _format_checker() -> jsonschema.FormatChecker:
    """The formats codemask asserts (a JSON Schema format is an annotation unless a validator
    asserts it), each as its documented pattern."""
    checker = jsonschema.FormatChecker([])
    for name, pattern in strings.FORMATS.items():
        checker.checks(name)(lambda value, p=pattern: not isinstance(value, str) or re.fullmatch(p, value) is not None)
    return checker


FORMATS = _format_checker()


def reordered(schema: Any, value: Any) -> Any:
    """``value`` with its keys in the schema's ``properties`` order, or None when it holds a key the
    schema does not declare there (or the schema shape is beyond this simple reading)."""
    if isinstance(value, dict):
        if not isinstance(schema, dict) or any(k in schema for k in ("$ref", "allOf", "anyOf", "oneOf", "if")):
            return None
        properties = schema.get("properties") or {}
        if set(value) - set(properties) or schema.get("patternProperties") or "additionalProperties" in schema:
            return None
        out = {}
        for key in properties:
            if key in value:
                inner = reordered(properties[key], value[key])
                if inner is None and value[key] is not None:
                    return None
                out[key] = value[key] if inner is None else inner
        return out
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        parts = [reordered(items, v) if isinstance(v, dict | list) else v for v in value]
        return None if any(p is None and isinstance(v, dict | list) for p, v in zip(parts, value, strict=True)) \
            else parts
    return value


@pytest.mark.slow
def test_valid_documents_in_schema_order_are_accepted_and_invalid_ones_never() -> None:
    """JSONSchemaBench: each valid instance rewritten in the schema's key order (when it uses declared
    keys only) is accepted in generation mode, compact and indented; no invalid instance is."""
    bench = corpus_or_skip("jsonschemabench")
    files = sorted(bench.glob("*.json"))
    random.Random(3).shuffle(files)
    accepted = rejected = 0
    for path in files[:120]:
        case = json.loads(path.read_text())
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                recognizer = Recognizer(Grammar.from_json_schema(case["schema"], strict=False))
        except UnsupportedSchemaError:
            continue
        validator = jsonschema.validators.validator_for(case["schema"])(case["schema"], format_checker=FORMATS)
        for test in case["tests"]:
            if not validator.is_valid(test["data"]):
                assert not recognizer.accepts(json.dumps(test["data"])), (path.stem, test["data"])
                rejected += 1
                continue
            written = reordered(case["schema"], test["data"])
            if written is None:
                continue
            for text in (json.dumps(written), json.dumps(written, indent=2)):
                assert recognizer.accepts(text), (path.stem, text[:200])
            accepted += 1
    assert accepted >= 30 and rejected >= 30


STRICT_CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems", "/"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
     "$ref", "/properties/x/$ref/$ref/$ref"),
    ({"oneOf": [{"pattern": "a"}, {"pattern": "b"}]}, "oneOf", "/"),
    ({"type": "string", "maxLength": 2_000_000}, "maxLength", "/"),
    ({"type": "string", "format": "email", "maxLength": 300}, "maxLength", "/"),
    ({"type": "object", "properties": {"a": {}}, "propertyNames": {"maxLength": 3}}, "propertyNames", "/"),
    ({"type": "object", "patternProperties": {p: {"type": "integer"} for p in "abcde"}}, "patternProperties", "/"),
    ({"type": "object", "anyOf": [{"properties": {"a": {}}}, {}], "unevaluatedProperties": False},
     "unevaluatedProperties", "/"),
]


@pytest.mark.parametrize(("schema", "keyword", "pointer"), STRICT_CASES, ids=[c[1] for c in STRICT_CASES])
def test_strict_refuses_what_is_not_enforced_exactly_and_lenient_warns_once(schema: dict[str, Any], keyword: str,
                                                                            pointer: str) -> None:
    for mode in ("generate", "validate"):
        with pytest.raises(UnsupportedSchemaError) as caught:
            Grammar.from_json_schema(schema, mode=mode)
        assert (caught.value.keyword, caught.value.pointer) == (keyword, pointer)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            Grammar.from_json_schema(schema, mode=mode, strict=False)
        messages = [str(w.message) for w in seen]
        assert sum(f"{keyword!r} is not enforced exactly" in m for m in messages) == 1, messages


def test_many_required_keys_in_any_order_are_refused_when_validating() -> None:
    keys = [f"k{i}" for i in range(40)]
    schema = {"type": "object", "properties": {k: {} for k in keys}, "required": keys}
    with pytest.raises(UnsupportedSchemaError) as caught:
        Grammar.from_json_schema(schema, mode="validate")
    assert caught.value.keyword == "required"
    Grammar.from_json_schema(schema)  # generation enforces them all, in order


def test_modes_and_their_errors() -> None:
    with pytest.raises(ValueError, match="mode="):
        Grammar.from_json_schema({}, mode="check")
