"""Structured output inside free text (`Grammar.from_tags`, `Grammar.from_structural_tag`)."""

from __future__ import annotations

import json

import pytest

from codemask.engine.matcher import GrammarMatcher
from codemask.engine.recognizer import Recognizer
from codemask.errors import GrammarError
from codemask.grammar.grammar import Grammar
from codemask.grammar.structural import Tag, tool_call_tags
from tests.engine.conftest import compiler

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                  "required": ["a", "b"]}}}


def call(name: str, arguments: dict[str, object]) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


def test_tool_calls_between_free_text() -> None:
    recognizer = Recognizer(Grammar.from_tags(tool_call_tags([WEATHER, ADD]), triggers=["<tool_call>"]))
    assert recognizer.accepts("No tool is needed: 2 + 2 = 4.")
    assert recognizer.accepts("")
    assert recognizer.accepts("Let me look.\n" + call("get_weather", {"city": "Paris"}))
    assert recognizer.accepts(call("add", {"a": 1, "b": 2}) + " then " + call("add", {"a": 3, "b": 4}) + "\nDone.")
    assert recognizer.accepts("a <tool_ca") and recognizer.accepts("<<tool_call")  # prefixes of the trigger
    assert not recognizer.accepts(call("add", {"a": 1}))  # a required argument missing
    assert not recognizer.accepts(call("mul", {"a": 1, "b": 2}))  # no such tool
    assert not recognizer.accepts("text <tool_call> more text")  # the trigger only begins a call
    assert not recognizer.accepts(call("get_weather", {"city": "Paris", "unit": "k"}))


def test_required_call_and_stop_after_first() -> None:
    required = Recognizer(Grammar.from_tags(tool_call_tags([ADD]), at_least_one=True))
    assert not required.accepts("I can answer that myself.")
    assert required.accepts("Calling.\n" + call("add", {"a": 1, "b": 2}))
    first = Recognizer(Grammar.from_tags(tool_call_tags([ADD]), triggers=["<tool_call>"], at_least_one=True,
                                         text_first=False))
    assert first.accepts(call("add", {"a": 1, "b": 2}) + " done")
    assert not first.accepts("x" + call("add", {"a": 1, "b": 2}))
    once = Recognizer(Grammar.from_tags(tool_call_tags([ADD]), stop_after_first=True))
    assert once.accepts(call("add", {"a": 1, "b": 2}))
    assert not once.accepts(call("add", {"a": 1, "b": 2}) + " and more")


def test_reasoning_then_json_answer_in_xgrammars_format() -> None:
    spec = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["</think>"], "at_least_one": True, "stop_after_first": True,
        "tags": [{"begin": "</think>", "end": "", "content": {"type": "json_schema", "json_schema": {
            "type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}}}]}}
    recognizer = Recognizer(Grammar.from_structural_tag(json.dumps(spec)))
    assert recognizer.accepts('<think>6 times 7 is 42</think>\n{"answer": 42}')
    assert not recognizer.accepts("<think>still thinking")
    assert not recognizer.accepts('<think>x</think>{"answer": "42"}')


def test_vllms_original_structural_tag_format() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    spec = {"structures": [{"begin": "<function=f>", "schema": schema, "end": "</function>"}],
            "triggers": ["<function="]}
    recognizer = Recognizer(Grammar.from_structural_tag(spec))
    assert recognizer.accepts('Searching <function=f>{"q": "x"}</function> done')
    assert not recognizer.accepts("<function=g>{}</function>")


def test_contents_other_than_schemas() -> None:
    grammar = Grammar.from_structural_tag({"format": {"type": "triggered_tags", "triggers": ["<"], "tags": [
        {"begin": "<n>", "content": {"type": "regex", "pattern": "[0-9]+"}, "end": "</n>"},
        {"begin": "<c>", "content": {"type": "const_string", "value": "ok"}, "end": "</c>"},
        {"begin": "<t>", "content": {"type": "any_text"}, "end": "</t>"}]}})
    recognizer = Recognizer(grammar)
    assert recognizer.accepts("a <n>12</n> b <c>ok</c> <t>any <b>text</b></t>")
    assert not recognizer.accepts("<n>x</n>") and not recognizer.accepts("<c>no</c>") and not recognizer.accepts("<b>")


@pytest.mark.parametrize("spec", [
    {}, {"structures": []}, {"structures": [{"begin": 1}]}, {"format": {"type": "sequence"}}, "{not json",
    {"structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}], "triggers": ["<b>"]},
])
def test_bad_specs_are_clear_errors(spec: object) -> None:
    with pytest.raises(GrammarError):
        Grammar.from_structural_tag(spec)


def test_the_trigger_token_of_qwen_is_allowed_where_a_call_may_start() -> None:
    """Qwen2.5's ``<tool_call>`` is one token: the mask allows it in free text, and after it only
    the call's forced begin; the model's end-of-sequence is allowed in free text only."""
    qwen = compiler("qwen3")
    matcher = GrammarMatcher(qwen.compile(Grammar.from_tags(tool_call_tags([WEATHER]), triggers=["<tool_call>"])))
    trigger = qwen.vocab.token_bytes.index(b"<tool_call>")
    eos = qwen.vocab.eos_token_id
    assert matcher.is_token_allowed(trigger) and matcher.is_token_allowed(eos)
    for token in qwen.vocab.token_bytes.index(b"Hi"), trigger:
        assert matcher.accept_token(token)
    assert not matcher.is_token_allowed(eos)
    rest = b'\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert matcher.accept_bytes(rest)
    assert matcher.is_token_allowed(eos)


def test_tags_need_byte_level_contents() -> None:
    with pytest.raises(GrammarError, match="byte-level"):
        Grammar.from_tags([Tag("<py>", Grammar.builtin("python"), "</py>")])
