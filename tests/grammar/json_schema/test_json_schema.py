"""Grammar.from_json_schema: keywords, spellings, whitespace modes, strictness and errors."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import jsonschema
import pydantic
import pytest

from codemask.engine.recognizer import Recognizer
from codemask.errors import GrammarError, InvalidSchemaError, UnsupportedSchemaError
from codemask.grammar.grammar import Grammar
from codemask.grammar.ir import grammar_text
from codemask.grammar.json_schema import nodes
from codemask.grammar.optimize import optimize
from codemask.grammar.resolve import as_grammar
from tests.data_paths import TEST_DATA

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "exclusiveMaximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True, "maxItems": 3},
        "score": {"type": "number", "multipleOf": 0.01, "minimum": -1, "maximum": 1},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}

CASES: list[tuple[dict[str, Any], list[Any]]] = [
    (PERSON, [{"name": "Ann", "age": 3}, {"age": 149, "name": "x" * 20, "tags": ["a", "c"], "score": -0.25},
              {"name": "", "age": 3}, {"name": "Ann"}, {"name": "Ann", "age": 150}, {"name": "Ann", "age": 1, "x": 1},
              {"name": "Ann", "age": 1, "score": 0.125}, {"name": "Ann", "age": 1, "email": "no-at-sign"},
              {"name": "Ann", "age": 1, "email": "ann@example.org"}, {"name": "Ann", "age": 1.0}]),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 3, 2.5, "x", 1.5]),
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, [{"a": 1}, {"a": 1, "b": 2}, {"b": 2}, {}]),
    ({"type": "array", "contains": {"const": 1}, "minContains": 2, "maxContains": 3},
     [[1], [1, 1], [1, 2, 1, 1], [1, 1, 1, 1], [2, 3]]),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
     [["a"], ["a", 1], ["a", 1, 2], [1]]),
    ({"not": {"enum": ["a", "ab"]}, "type": "string"}, ["a", "ab", "abc", "", "b"]),
    ({"not": {"enum": ["x" * 70, "x" * 69 + "y", "ab"]}, "type": "string"},  # (past the trie memo's word length)
     ["x" * 70, "x" * 69 + "y", "x" * 69, "x" * 71, "x" * 69 + "z", "ab", "a"]),
    ({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}, ["ab-12", "ab-1", "AB-12", "ab-123"]),
    ({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "integer"}},
                         "additionalProperties": False}}, "$ref": "#/$defs/node"},
     [{"v": 1, "next": {"v": 2, "next": {}}}, {"next": {"v": "x"}}, {"w": 1}]),
    ({"if": {"properties": {"kind": {"const": "circle"}}}, "then": {"required": ["radius"]},
      "else": {"required": ["side"]}},
     [{"kind": "circle", "radius": 1}, {"kind": "circle", "side": 1}, {"kind": "square", "side": 1}]),
    ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
     [{"x-a": 1}, {"x-a": "s"}, {"y": 1}, {}]),
    ({"const": {"a": [1, {"b": None}], "c": "é"}}, [{"c": "é", "a": [1, {"b": None}]}, {"a": [1, {"b": None}]}]),
    ({"type": ["string", "integer"], "minLength": 1, "anyOf": [{"type": "integer"}, {"not": {"minLength": 1}}]},
     ["", "a", 5, 2.5]),  # the string branch is contradictory (length >= 1 and < 1): integers remain
    ({"type": "object", "properties": {"dog": {"type": "integer"}, "do": {"type": "string"},
                                        "café": {"type": "boolean"}, 'q"x': {"type": "null"}}},
     [{"dog": 1}, {"dog": "x"}, {"do": "x"}, {"do": 1}, {"d": 1}, {"dogs": 1}, {"café": True}, {"café": 1},
      {"caf": 1}, {"cafés": 1}, {"é": 1}, {"": 2}, {"x\u00e9y": [1]}, {'q"x': None}, {'q"x': 1}, {'q"': 1},
      {"\U0001F600": 1}]),  # other keys next to known ones, in raw and \u spellings
    ({"enum": [{k: i for i, k in enumerate("abcdefg")}]},  # past 5 members: any order, every one present
     [dict(reversed([(k, i) for i, k in enumerate("abcdefg")])), {k: i for i, k in enumerate("abcdef")}]),
]


def spellings(value: Any) -> list[str]:
    return [json.dumps(value), json.dumps(value, separators=(",", ":")), json.dumps(value, indent=2),
            json.dumps(value, ensure_ascii=False), json.dumps(value, indent="\t")]


@pytest.mark.parametrize(("schema", "instances"), CASES, ids=range(len(CASES)))
def test_accepts_exactly_what_jsonschema_validates(schema: dict[str, Any], instances: list[Any]) -> None:
    recognizer = Recognizer(Grammar.from_json_schema(schema, mode="validate"))
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for instance in instances:
        expected = validator.is_valid(instance)
        for text in spellings(instance):
            assert recognizer.accepts(text) == expected, (schema, text)


def test_a_reference_met_again_resolves_alike_and_a_missing_one_is_reported_each_time() -> None:
    """References are resolved once per document and resolver; one that cannot be resolved is not
    remembered, so each place it is met is named."""
    definitions = {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}},
                                       "required": ["x"]},
                             "other": {"$ref": "#/$defs/point"}}}
    schema = {**definitions, "type": "array", "prefixItems": [{"$ref": "#/$defs/point"}, {"$ref": "#/$defs/other"},
                                                              {"$ref": "#/$defs/point"}]}
    recognizer = Recognizer(Grammar.from_json_schema(schema, mode="validate"))
    validator = jsonschema.Draft202012Validator(schema)
    for instance in ([{"x": 1}, {"x": 2}, {"x": 3}], [{"x": 1}, {"y": 2}], [{"x": 1}, {"x": 2}, {"x": "3"}]):
        assert recognizer.accepts(json.dumps(instance)) == validator.is_valid(instance), instance
    missing = {"type": "object", "properties": {"a": {"$ref": "#/$defs/nowhere"}, "b": {"$ref": "#/$defs/nowhere"}}}
    with pytest.warns(UserWarning, match=r"/properties/a.*/properties/b"):
        Grammar.from_json_schema(missing, strict=False)


def test_object_members_may_come_in_any_order_but_required_ones_must_come() -> None:
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abcd"}, "required": ["a", "c"]}
    recognizer = Recognizer(Grammar.from_json_schema(schema, mode="validate"))
    assert recognizer.accepts('{"d": 1, "c": 2, "b": 3, "a": 4}')
    assert recognizer.accepts('{"c": 2, "a": 4}')
    assert not recognizer.accepts('{"d": 1, "b": 3, "a": 4}')
    assert not recognizer.accepts('{"a": "x", "c": 2}')


def test_other_keys_take_every_raw_character_a_json_string_may_hold() -> None:
    """A key the schema does not name may hold raw DEL (JSON escapes only the quote, the backslash and
    control characters below the space) at every place of the names' trie, as the checker says."""
    schema = {"type": "object", "properties": {"ab": {"type": "integer"}, "cd": {}}}
    recognizer = Recognizer(Grammar.from_json_schema(schema, mode="validate"))
    validator = jsonschema.Draft202012Validator(schema)
    for key in ["\x7f", "a\x7f", "ab\x7f", "\x7fab", "c\x7fd", "~", "ab~"]:
        text = json.dumps({key: 1}, ensure_ascii=False)
        assert validator.is_valid(json.loads(text)) and recognizer.accepts(text), repr(text)
    assert not recognizer.accepts('{"ab": "x"}')


def test_escaped_spellings_of_keys_and_values_are_the_same_string() -> None:
    """Non-ASCII and control characters in any spelling; printable ASCII raw (docs/guides/json-schema.md)."""
    schema = {"type": "object", "properties": {"é": {"const": "tab\there"}}, "required": ["é"],
              "additionalProperties": False}
    recognizer = Recognizer(Grammar.from_json_schema(schema, mode="validate"))
    assert recognizer.accepts('{"é": "tab\\there"}')
    assert recognizer.accepts('{"\\u00e9": "tab\\u0009here"}')
    assert recognizer.accepts('{"\\u00E9": "tab\\u0009here"}')
    assert not recognizer.accepts('{"\\u00e8": "tab\\there"}')
    assert not recognizer.accepts('{"\\u00e9": "t\\u0061b\\there"}')


@pytest.mark.parametrize("whitespace", ["compact", 2, 4])
def test_whitespace_modes_fix_the_layout(whitespace: str | int) -> None:
    recognizer = Recognizer(Grammar.from_json_schema(PERSON, whitespace=whitespace, mode="validate"))
    value = {"name": "Ann", "age": 3, "tags": ["a", "b"]}
    if whitespace == "compact":
        exact = json.dumps(value, separators=(",", ":"))
    else:
        exact = json.dumps(value, indent=whitespace)
    assert recognizer.accepts(exact)
    assert not recognizer.accepts(json.dumps(value, indent=3))
    assert not recognizer.accepts(json.dumps(value))


def test_flexible_whitespace_accepts_any_json_layout() -> None:
    recognizer = Recognizer(Grammar.from_json_schema(PERSON, mode="validate"))
    assert recognizer.accepts(' {\n\t"age" :3 ,"name":\r\n"Ann"}\n')


def test_strict_mode_names_the_keyword_and_its_pointer() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)x"}}}
    with pytest.raises(UnsupportedSchemaError) as caught:
        Grammar.from_json_schema(schema)
    assert caught.value.keyword == "pattern"
    assert caught.value.pointer == "/properties/a"


def test_lenient_mode_warns_and_accepts_a_superset() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)x"}}}
    with pytest.warns(UserWarning, match="pattern"):
        recognizer = Recognizer(Grammar.from_json_schema(schema, strict=False))
    assert recognizer.accepts('{"a": "x"}')
    assert recognizer.accepts('{"a": "anything"}')
    assert not recognizer.accepts('{"a": 1}')


def meta_schema_error(schema: Any) -> str | None:
    """What ``jsonschema`` alone says of a schema against its draft's meta-schema (the oracle)."""
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(validator(validator.META_SCHEMA).iter_errors(schema))
    return None if error is None else error.message


def test_the_fast_meta_schema_check_refuses_exactly_what_jsonschema_refuses() -> None:
    """`Document.load` asks the Rust validator first and ``jsonschema`` only where it says no: the
    same schemas are refused, with the same message, as with ``jsonschema`` alone — on the sample's
    schemas, the test suite's, and copies of them with one keyword's value broken."""
    assert nodes._RS is not None  # (a dependency: the check below would pass on jsonschema alone)
    bench = sorted((TEST_DATA / "jsonschemabench").glob("*.json"))
    schemas = [json.loads(path.read_text())["schema"] for path in bench]
    for path in sorted((TEST_DATA / "json-schema-test-suite").rglob("*.json")):
        schemas += [group["schema"] for group in json.loads(path.read_text()) if isinstance(group, dict)]
    rng = random.Random(0)
    broken = []
    for schema in schemas:
        if isinstance(schema, dict) and set(schema) - {"$schema"}:
            keyword = rng.choice(sorted(set(schema) - {"$schema"}))
            broken.append({**schema, keyword: rng.choice([-1, "x", [], {}, [1, 1], None, True])})
    draft4 = "http://json-schema.org/draft-04/schema#"
    broken += [{"$schema": draft4, "enum": [1, 1.0]}, {"$schema": draft4, "properties": {"a": {"enum": []}}}]
    refused = 0
    for schema in schemas + broken:
        expected = meta_schema_error(schema)
        try:
            nodes.Document.load(schema, strict=True)
        except InvalidSchemaError as error:
            assert expected is not None and expected in str(error), (schema, expected, error)
            refused += 1
        else:
            assert expected is None, (schema, expected)
    assert refused > len(broken) // 3


def test_invalid_schemas_and_bad_arguments_get_clear_errors() -> None:
    with pytest.raises(InvalidSchemaError, match="/properties/a"):
        Grammar.from_json_schema({"properties": {"a": {"type": "strin"}}})
    with pytest.raises(InvalidSchemaError, match="not valid JSON"):
        Grammar.from_json_schema("{not json")
    with pytest.raises(InvalidSchemaError, match="object or a boolean"):
        Grammar.from_json_schema([1, 2])  # type: ignore[arg-type]
    for contradiction in (False, {"type": "string", "enum": [1]}, {"type": "integer", "minimum": 3, "maximum": 2}):
        with pytest.raises(GrammarError, match="accepts no JSON value"):
            Grammar.from_json_schema(contradiction)
    with pytest.raises(ValueError, match="whitespace="):
        Grammar.from_json_schema({}, whitespace="pretty")


@pytest.mark.parametrize("mode", ["generate", "validate"])
def test_uniqueitems_over_a_finite_set_is_exact(mode: str) -> None:
    """Items drawn from enums/booleans/null: each value at most once (generation writes them in the
    enum's order, validation takes any order); checked against jsonschema on every short array."""
    schema = {"type": "array", "items": {"enum": ["a", "b", 1, 1.0, None]}, "uniqueItems": True, "minItems": 1}
    values = ["a", "b", 1, None]
    validator = jsonschema.Draft202012Validator(schema)
    recognizer = Recognizer(Grammar.from_json_schema(schema, mode=mode))
    for n in range(5):
        for items in itertools.product([*values, 1.0], repeat=n):
            expected = validator.is_valid(list(items))
            if mode == "generate" and expected:
                order = [values.index(v) for v in items]
                expected = order == sorted(order)
            assert recognizer.accepts(json.dumps(list(items))) == expected, items


@pytest.mark.parametrize("mode", ["generate", "validate"])
def test_uniqueitems_that_cannot_be_enforced_is_refused_or_warned(mode: str) -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                        "uniqueItems": True}}}
    with pytest.raises(UnsupportedSchemaError) as caught:
        Grammar.from_json_schema(schema, mode=mode)
    assert (caught.value.keyword, caught.value.pointer) == ("uniqueItems", "/properties/tags")
    with pytest.warns(UserWarning, match="'uniqueItems' is not enforced exactly at /properties/tags"):
        recognizer = Recognizer(Grammar.from_json_schema(schema, mode=mode, strict=False))
    assert recognizer.accepts('{"tags": ["x", "x"]}')  # the documented superset


def test_pydantic_models_and_grammar_specs() -> None:
    class Point(pydantic.BaseModel):
        x: int
        y: float = 0.0
        label: str | None = None

    recognizer = Recognizer(Grammar.from_pydantic(Point, mode="validate"))
    assert recognizer.accepts('{"x": 1, "y": 2.5}')
    assert recognizer.accepts('{"label": null, "x": -3}')
    assert not recognizer.accepts('{"y": 2.5}')
    assert as_grammar(Point).cache_key == Grammar.from_pydantic(Point).cache_key
    assert as_grammar({"type": "integer"}).cache_key == Grammar.from_json_schema({"type": "integer"}).cache_key
    with pytest.raises(TypeError, match="pydantic"):
        Grammar.from_pydantic(int)


def test_schemas_are_keyed_by_their_json_text() -> None:
    """A schema's cache key comes from its canonical JSON text (key order aside) and the options;
    what JSON cannot hold, which would make two schemas one text, is refused with its place."""
    def key(schema: Any, **options: Any) -> str:
        return Grammar.from_json_schema(schema, **options).cache_key

    person = json.loads(json.dumps(PERSON))
    reordered = dict(reversed(list(person.items())))
    assert key(person) == key(reordered) == key(json.dumps(PERSON))
    assert key(person) != key(person, mode="validate") != key(person, mode="validate", whitespace="compact")
    assert len({key({"const": 1}), key({"const": 1.0}), key({"const": True})}) == 3
    with pytest.raises(InvalidSchemaError, match=r"at /enum/1: a tuple is not a JSON value"):
        Grammar.from_json_schema({"enum": [[1, 2], (1, 2)]})
    with pytest.raises(InvalidSchemaError, match=r"at /properties: the key 1 is not a string"):
        Grammar.from_json_schema({"type": "object", "properties": {1: {"type": "integer"}}})


def test_a_schemas_key_follows_the_libraries_that_resolve_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another version of `referencing` (which resolves a schema's references) may build another
    grammar from the same schema text: its key must change with it."""
    import importlib.metadata

    from codemask.grammar import grammar as grammar_module

    before = Grammar.from_json_schema(PERSON).cache_key
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "0.0.0" if name == "referencing" else real_version(name))
    grammar_module._front_end_fingerprint.cache_clear()
    try:
        assert Grammar.from_json_schema(PERSON).cache_key != before
    finally:
        monkeypatch.undo()
        grammar_module._front_end_fingerprint.cache_clear()
    assert Grammar.from_json_schema(PERSON).cache_key == before


def test_free_strings_are_shared_rules_that_optimisation_keeps() -> None:
    """Every free string (any characters, a value or an unknown key) is one `Rule.shared` rule
    with its quotes, which inlining leaves alone: the token masks inside it are then classified
    once per process for every grammar that has it."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {}}}}
    ir = Grammar.from_json_schema(schema).ir
    shared = {name for name, rule in ir.rules.items() if rule.shared}
    assert len(shared) == 1
    (name,) = shared
    optimized = optimize(ir)
    assert name in optimized.rules and optimized.rules[name].shared
    assert f"{name} ::= " in grammar_text(optimized) and "%shared" in grammar_text(optimized)
    recognizer = Recognizer(Grammar.from_json_schema(schema, mode="validate"))
    for doc in ({"a": "x\"y", "zz": "free key", "b": ["s", {"k": "v"}]}, {"a": 1}):
        assert recognizer.accepts(json.dumps(doc).encode()) == jsonschema.Draft202012Validator(schema).is_valid(doc)
