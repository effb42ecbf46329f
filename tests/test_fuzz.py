"""Fuzzing the public surface with bad input: grammar texts (EBNF, Lark, regex), JSON Schemas,
token ids and matcher call sequences. Whatever the input, codemask either works or raises a
`CodemaskError`, or a `TypeError`/`ValueError` with a message; anything else (`IndexError`,
`AttributeError`, `RecursionError`, `OverflowError`, `UnicodeError`, `KeyError`...) fails.

Bounded for CI: derandomized, a fixed number of examples (``CODEMASK_FUZZ_EXAMPLES`` raises it
for a longer local run), no deadline."""

from __future__ import annotations

import os
import string
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codemask import Grammar, GrammarCompiler, GrammarMatcher
from codemask.errors import CodemaskError
from tests.engine.conftest import vocabulary

EXAMPLES = int(os.environ.get("CODEMASK_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


def check(action: Any, *args: Any) -> Any:
    """Run ``action``; an error must be a codemask error or a TypeError/ValueError with a message."""
    try:
        return action(*args)
    except CodemaskError:
        return None
    except (TypeError, ValueError) as error:
        if isinstance(error, UnicodeError) or not str(error).strip():
            raise AssertionError(f"{type(error).__name__} is no clear error: {error!r}") from error
        return None


def compiler() -> GrammarCompiler:
    return GrammarCompiler(vocabulary("gpt2"), cache_dir=False, progress=False)


def exercise(grammar: Grammar | None, data: bytes) -> None:
    """Compile ``grammar`` and walk a matcher over ``data`` byte by byte, with masks."""
    if grammar is None:
        return
    compiled = check(compiler().compile, grammar)
    if compiled is None:
        return
    matcher = check(GrammarMatcher, compiled)
    if matcher is None:
        return
    row = np.zeros((1, (compiled.vocab_size + 31) // 32), dtype=np.int32)
    for byte in data[:24]:
        matcher.fill_next_token_bitmask(row)
        if not matcher.accept_bytes(bytes([byte])):
            break
    matcher.find_jump_forward_bytes()
    matcher.can_terminate()


# -- grammar texts ------------------------------------------------------------------------------

EBNF_PIECES = ['root ::= ', 'a ::= ', 'b ::= ', '"x"', '"\\u00e9"', '"\\xff"', "'y'", "[a-z]", "[^\\x00-\\U0010FFFF]",
               "[\\uD800-\\uDFFF]", "(", ")", "|", "*", "+", "?", "{", "}", ",", "0", "3", "99999999999999999999",
               "a", "b", "c", " ", "\n", ".", "#", "\\", '"', "[", "]", "-", "::=", "(=", "é", "\x00", "\ud800"]
LARK_PIECES = ["start: ", "a: ", "A: ", "?b: ", '"x"', "/[0-9]+/", "/(/", "A", "a", "b", "(", ")", "[", "]", "|", "*",
               "+", "?", "~", "3", "..", "%ignore ", "%import common.WS", "%declare _INDENT", "\n", " ", "->", "!",
               "_", "{", "}", ",", "//"]
REGEX_ALPHABET = "ab()[]{}|*+?.^$\\-,0123456789dswDSWbB:=!<>P#iux é\n"


def pieces(options: list[str]) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(options), max_size=24).map("".join)


def ebnf_expressions() -> st.SearchStrategy[str]:
    """Mostly well-formed EBNF expressions, with odd corners: empty strings, escapes, classes of
    nothing, surrogates, bounds out of order or too large, references to rules that may not exist."""
    atoms = st.one_of(
        st.text(alphabet='ab"\\é\n', max_size=3).map(lambda t: '"' + t.replace('"', '\\"') + '"'),
        st.sampled_from(['""', '"\\u00e9"', '"\\x41"', "[a-c]", "[^a]", "[\\uD800-\\uDFFF]", "[^\\x00-\\U0010FFFF]",
                         ".", "a", "b", "undefined_rule", "root"]))
    quantifiers = st.sampled_from(["", "*", "+", "?", "{2}", "{1,3}", "{3,1}", "{0,}", "{,2}", "{99999999999999999999}",
                                   "{0,9223372036854775807}", "{40}"])

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        group = st.builds(lambda items, q: "(" + " ".join(items) + ")" + q, st.lists(inner, min_size=1, max_size=3),
                          quantifiers)
        choice = st.lists(inner, min_size=2, max_size=3).map(" | ".join)
        return st.one_of(group, choice, st.builds(lambda a, q: a + q, inner, quantifiers))

    return st.recursive(atoms, extend, max_leaves=10)


EBNF_GRAMMARS = st.builds(lambda root, a, b: f"root ::= {root}\na ::= {a}\nb ::= {b}\n",
                          ebnf_expressions(), ebnf_expressions(), ebnf_expressions())


@FUZZ
@given(text=st.one_of(EBNF_GRAMMARS, pieces(EBNF_PIECES), st.text(max_size=60)), data=st.binary(max_size=24))
def test_fuzz_ebnf_text(text: str, data: bytes) -> None:
    exercise(check(Grammar.from_ebnf, text), data)


@FUZZ
@given(text=pieces(LARK_PIECES), data=st.binary(max_size=24))
def test_fuzz_lark_text(text: str, data: bytes) -> None:
    exercise(check(Grammar.from_lark, text), data)


@FUZZ
@given(pattern=st.text(alphabet=REGEX_ALPHABET, max_size=30), data=st.binary(max_size=24))
def test_fuzz_regex(pattern: str, data: bytes) -> None:
    exercise(check(Grammar.from_regex, pattern), data)


# -- JSON Schemas -------------------------------------------------------------------------------

NUMBERS = st.one_of(st.integers(min_value=-(10**30), max_value=10**30), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, 1, -1, 2**63, 10**400]))
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=8), st.just("#"), st.just("#/definitions/x"))
TYPES = st.sampled_from(["string", "integer", "number", "object", "array", "boolean", "null", "nonsense"])
KEYWORDS = ["type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
            "minLength", "maxLength", "pattern", "format", "items", "prefixItems", "minItems", "maxItems",
            "uniqueItems", "contains", "properties", "required", "additionalProperties", "patternProperties",
            "propertyNames", "minProperties", "maxProperties", "anyOf", "allOf", "oneOf", "not", "if", "then",
            "else", "$ref", "definitions", "$defs", "dependentRequired", "unevaluatedProperties"]


def schemas() -> st.SearchStrategy[Any]:
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        value = st.one_of(children, LEAVES, TYPES, st.lists(children, max_size=3),
                          st.dictionaries(st.text(max_size=4), children, max_size=3))
        return st.one_of(st.lists(children, max_size=3),
                         st.dictionaries(st.sampled_from(KEYWORDS), value, max_size=4))

    return st.recursive(st.one_of(LEAVES, st.builds(lambda t: {"type": t}, TYPES)), extend, max_leaves=12)


@FUZZ
@given(schema=schemas(), strict=st.booleans(), data=st.binary(max_size=16))
def test_fuzz_json_schema(schema: Any, strict: bool, data: bytes) -> None:
    exercise(check(lambda: Grammar.from_json_schema(schema, strict=strict)), b'{"' + data)


@FUZZ
@given(text=st.one_of(st.text(max_size=40), st.just('{"type": "string", "maxLength": 1e999}'),
                      st.just('{"enum": [NaN]}'), st.just("[" * 5000)))
def test_fuzz_json_schema_text(text: str) -> None:
    check(Grammar.from_json_schema, text)


# -- token ids and matcher call sequences --------------------------------------------------------

WEIRD = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.integers(min_value=0, max_value=50300),
                  st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=3), st.binary(max_size=3),
                  st.just(np.int64(5)), st.just(np.float32(1.0)), st.just([1, 2]))


def bitmasks() -> st.SearchStrategy[Any]:
    words = (vocabulary("gpt2").vocab_size + 31) // 32
    return st.sampled_from([
        np.zeros((2, words), np.int32), np.zeros(words, np.int32), np.zeros((1, words), np.int64),
        np.zeros((1, 3), np.int32), np.zeros((), np.int32), np.zeros((2, 2, words), np.int32),
        torch.zeros((2, words), dtype=torch.int32), torch.zeros((2, words), dtype=torch.float32), [0] * words,
        np.zeros((2, words), np.int32)[:, ::2], "mask",
    ])


CALLS = st.one_of(
    st.tuples(st.just("accept_token"), WEIRD),
    st.tuples(st.just("accept_token"), st.integers(min_value=0, max_value=50256)),
    st.tuples(st.just("accept_bytes"), st.one_of(st.binary(max_size=6), st.text(max_size=4), WEIRD)),
    st.tuples(st.just("fill_next_token_bitmask"), st.tuples(bitmasks(), WEIRD)),
    st.tuples(st.just("rollback"), WEIRD),
    st.tuples(st.just("is_token_allowed"), WEIRD),
    st.tuples(st.sampled_from(["reset", "fork", "find_jump_forward_bytes", "is_terminated", "can_terminate",
                               "next_token_bitmask"]), st.none()),
)


@pytest.fixture(scope="module")
def json_grammar() -> Any:
    return compiler().compile(Grammar.builtin("json"))


@FUZZ
@given(calls=st.lists(CALLS, max_size=25), prefix=st.sampled_from(["", "{", '[1, "a', "x"]))
def test_fuzz_matcher_calls(json_grammar: Any, calls: list[tuple[str, Any]], prefix: str) -> None:
    matcher = check(lambda: GrammarMatcher(json_grammar, prefix=prefix))
    if matcher is None:
        return
    for name, argument in calls:
        method = getattr(matcher, name)
        if name == "fill_next_token_bitmask":
            check(method, *argument)
        elif argument is None and name != "accept_bytes":
            result = check(method)
            if name == "fork" and result is not None:
                matcher = result
        else:
            check(method, argument)


@FUZZ
@given(texts=st.lists(st.text(alphabet=string.printable + "é€😀", max_size=12), max_size=6))
def test_fuzz_accepting_strings_keeps_masks_consistent(json_grammar: Any, texts: list[str]) -> None:
    """Whatever is fed, a matcher's mask allows exactly what `is_token_allowed` says of a few tokens."""
    matcher = GrammarMatcher(json_grammar)
    for text in texts:
        check(matcher.accept_string, text)
        words = matcher.next_token_bitmask()
        for token in (0, 1, 90, 198, 50256):
            assert matcher.is_token_allowed(token) == bool((int(words[token >> 5]) >> (token & 31)) & 1)
