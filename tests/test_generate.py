"""`constrained_generate` with the packaged SmolLM2: outputs parse, batches, jump-forward, stops."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import pytest
import torch

from codemask import Grammar, Sampling, constrained_generate
from tests.conftest import chat

pytestmark = pytest.mark.slow

JSON_REQUESTS = [
    "Describe a cat as a JSON object with name, age and color.",
    "Give me a JSON list of three fruits.",
    "Return a JSON object with the keys city and country for Paris.",
    "Describe a dog as JSON with name and breed.",
]
# A grammar with long forced stretches (the keys and punctuation), as a JSON Schema gives.
PERSON = r'''
root   ::= "{\"name\": \"" [A-Za-z ]{1,30} "\", \"age\": " [1-9] [0-9]? ", \"email\": \"" [a-z.]{1,20} "@example.com\"}"
'''
PERSON_RE = re.compile(r'\{"name": "[A-Za-z ]{1,30}", "age": [1-9][0-9]?, "email": "[a-z.]{1,20}@example\.com"\}')


def test_greedy_json_parses(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    for request in JSON_REQUESTS:
        result = constrained_generate(model, tokenizer, chat(tokenizer, request), grammar="json", max_new_tokens=120)
        assert result.finish_reason == "grammar_end", result
        json.loads(result.text)
        assert result.stats.generated_tokens == len(result.token_ids) > 0
        assert result.stats.forward_passes >= 1 and result.stats.wall_time_s > 0


def test_sampled_json_parses(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    prompt = chat(tokenizer, JSON_REQUESTS[0])
    texts = set()
    ended = 0
    for seed in range(6):  # at temperature 1 the small model rambles past the budget now and then
        result = constrained_generate(model, tokenizer, prompt, grammar="json", max_new_tokens=120,
                                      sampling=Sampling(temperature=1.0, top_p=0.95, seed=seed))
        if result.finish_reason == "grammar_end":
            json.loads(result.text)
            ended += 1
        else:
            assert result.finish_reason == "length" and len(result.token_ids) == 120, result
        texts.add(result.text)
    assert ended >= 3
    assert len(texts) > 1  # sampling does sample
    again = constrained_generate(model, tokenizer, prompt, grammar="json", max_new_tokens=120,
                                 sampling=Sampling(temperature=1.0, top_p=0.95, seed=5))
    assert again.token_ids == result.token_ids  # and a seed reproduces it


def test_regex_and_code_grammar(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    date = constrained_generate(model, tokenizer, chat(tokenizer, "When did the Berlin wall fall? Answer with a date."),
                                grammar=Grammar.from_regex(r"\d{4}-\d{2}-\d{2}"), max_new_tokens=20)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date.text) and date.finish_reason == "grammar_end"
    code = constrained_generate(model, tokenizer, chat(tokenizer, "Write a Python function that adds two numbers."),
                                grammar="python_function", max_new_tokens=120)
    assert code.finish_reason == "grammar_end", code
    compile(ast.parse(code.text), "<generated>", "exec")


def test_unconstrained_greedy_equals_transformers_generate(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    prompt = chat(tokenizer, "Name three colors.")
    ours = constrained_generate(model, tokenizer, prompt, max_new_tokens=24)
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.inference_mode():
        theirs = model.generate(**ids, max_new_tokens=24, do_sample=False)
    reference = theirs[0, ids["input_ids"].shape[1]:].tolist()
    stop_ids = {tokenizer.eos_token_id}
    reference = reference[: next((i for i, t in enumerate(reference) if t in stop_ids), len(reference))]
    assert ours.token_ids == reference


def test_mixed_batch_rows_equal_their_single_runs(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    prompts = [chat(tokenizer, JSON_REQUESTS[2]), "def fibonacci(n):", chat(tokenizer, "Pick a number.")]
    grammars = ["json", None, Grammar.from_regex(r"[0-9]{1,3}")]
    batch = constrained_generate(model, tokenizer, prompts, grammar=grammars, max_new_tokens=40, jump_forward=False)
    assert isinstance(batch, list) and len(batch) == 3
    json.loads(batch[0].text)
    assert re.fullmatch(r"[0-9]{1,3}", batch[2].text)
    assert batch[1].finish_reason == "length" and len(batch[1].token_ids) == 40
    for prompt, grammar, row in zip(prompts, grammars, batch, strict=True):
        single = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=40,
                                      jump_forward=False)
        assert single.token_ids == row.token_ids  # left padding and finished rows change nothing


def test_jump_forward_keeps_output_valid_and_saves_forward_passes(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    prompt = chat(tokenizer, "Make up a person with a name, an age and an email address, as JSON.")
    plain = constrained_generate(model, tokenizer, prompt, grammar=PERSON, max_new_tokens=80, jump_forward=False)
    jumped = constrained_generate(model, tokenizer, prompt, grammar=PERSON, max_new_tokens=80)
    for result in (plain, jumped):
        assert PERSON_RE.fullmatch(result.text), result.text
        assert result.finish_reason == "grammar_end"
    assert plain.stats.grammar.forced_tokens == 0
    assert jumped.stats.grammar.forced_tokens > 0
    assert jumped.stats.forward_passes < plain.stats.forward_passes
    # the re-tokenised output is what the tokenizer itself would produce for the forced stretches
    assert tokenizer.decode(jumped.token_ids) == jumped.text


def test_stop_string_length_and_streaming(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    streamed: list[str] = []
    result = constrained_generate(model, tokenizer, "def add(a, b):\n", max_new_tokens=60, stop=["\n\n", "def "],
                                  on_token=lambda row, ids, text: streamed.append(text))
    assert result.finish_reason == "stop"
    assert "\n\n" not in result.text and "def " not in result.text
    assert "".join(streamed).startswith(result.text)
    short = constrained_generate(model, tokenizer, "Once upon a time", max_new_tokens=5)
    assert short.finish_reason == "length" and len(short.token_ids) == 5


def test_bad_arguments_fail_clearly(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    with pytest.raises(ValueError, match="max_new_tokens"):
        constrained_generate(model, tokenizer, "x", max_new_tokens=0)
    with pytest.raises(ValueError, match="2 grammars for 3 prompts"):
        constrained_generate(model, tokenizer, ["a", "b", "c"], grammar=["json", None])
    with pytest.raises(Exception, match="not a builtin grammar"):
        constrained_generate(model, tokenizer, "x", grammar="no_such_grammar")


# -- JSON that models finish (generation semantics, chat input, parsed results, tools) ----------------


def test_chat_messages_are_rendered_with_the_template(smollm2: tuple[Any, Any]) -> None:
    """A list of messages is one conversation (a list of lists a batch), rendered with the chat
    template: token for token what the template's text gives, without a second BOS."""
    model, tokenizer = smollm2
    messages = [{"role": "user", "content": "Name a colour."}]
    from_chat = constrained_generate(model, tokenizer, messages, max_new_tokens=8)
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert from_chat.stats.prompt_tokens == len(ids)
    batch = constrained_generate(model, tokenizer, [messages, messages], max_new_tokens=8)
    assert [r.token_ids for r in batch] == [from_chat.token_ids] * 2
    with pytest.raises(ValueError, match="role"):
        constrained_generate(model, tokenizer, [{"text": "hi"}], max_new_tokens=4)


def test_pydantic_result_is_parsed_and_every_field_written(smollm2: tuple[Any, Any]) -> None:
    """The issue's Pet: keys once each, in order, and `kind` (required) written; result.parsed is a Pet."""
    import pydantic

    class Pet(pydantic.BaseModel):
        name: str
        age: int
        kind: str

    model, tokenizer = smollm2
    for request in ("Describe a pet as JSON.", "Invent a dog.", "Give me a cat with its age."):
        result = constrained_generate(model, tokenizer, [{"role": "user", "content": request}], grammar=Pet,
                                      max_new_tokens=80)
        assert result.finish_reason == "grammar_end", result.text
        assert isinstance(result.parsed, Pet)
        assert list(result.json) == ["name", "age", "kind"]
    free = constrained_generate(model, tokenizer, "Say hi", max_new_tokens=4)
    assert free.parsed is None


def test_repeated_array_items_and_string_loops_are_ended(smollm2: tuple[Any, Any]) -> None:
    """SmolLM2 writes "Ace-Ace-Ace-…" until the token limit under a plain array schema; the decay of
    looping string content and of repeated items ends the string and then the array."""
    model, tokenizer = smollm2
    schema = {"type": "object", "properties": {"players": {"type": "array", "items": {"type": "string"}}},
              "required": ["players"]}
    messages = [{"role": "user", "content": "List poker card names as JSON."}]
    plain = constrained_generate(model, tokenizer, messages,
                                 grammar=Grammar.from_json_schema(schema, item_penalty=None), max_new_tokens=120)
    assert plain.finish_reason == "length"  # the loop this guards against
    decayed = constrained_generate(model, tokenizer, messages, grammar=Grammar.from_json_schema(schema),
                                   max_new_tokens=120)
    assert decayed.finish_reason == "grammar_end"
    items = decayed.json["players"]
    assert all(items[i:i + 3] != [items[i]] * 3 for i in range(len(items)))  # never three alike in a row


def test_a_tool_call_in_free_text_with_qwens_template() -> None:
    """Qwen2.5-Coder given tools through its own chat template writes a call the grammar holds to a
    tool's arguments schema; the call parses and names the tool."""
    from codemask import assets
    from codemask.grammar.structural import tool_call_tags

    model, tokenizer = assets.load_model("qwen-coder"), assets.load_tokenizer("qwen-coder")
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                          "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}}]
    messages = [{"role": "user", "content": "What is the weather like in Paris today?"}]
    prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    assert "<tool_call>" in prompt  # the template teaches the format the tags write
    # the small model writes the call without its tags when left free: a required call starts with one
    grammar = Grammar.from_tags(tool_call_tags(tools), triggers=["<tool_call>"], at_least_one=True, text_first=False)
    result = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=80)
    assert result.finish_reason == "grammar_end", result.text
    call = result.text[result.text.index("<tool_call>") + len("<tool_call>"): result.text.index("</tool_call>")]
    parsed = json.loads(call)
    assert parsed["name"] == "get_weather" and isinstance(parsed["arguments"]["city"], str)
