"""Speculative verification with the packaged SmolLM2: token-for-token the output of plain decoding.

Greedy and seeded sampled outputs are compared with the same call without ``speculative=`` across
grammars (none, JSON, a JSON Schema, a Python function), prompts (code edits that copy their context, free
requests) and batch sizes 1 and 3; copying prompts must take strictly fewer forward passes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from codemask import Sampling, constrained_generate
from codemask.adadec import AdaDec
from codemask.repetition import RPG
from codemask.speculative import GrammarDrafter, ModelDrafter, PromptLookupDrafter, SuffixDrafter
from tests.conftest import chat

pytestmark = pytest.mark.slow

SOURCE = '''def mean(values):
    total = 0
    for value in values:
        total += value
    return total / len(values)


def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value
'''
EDIT = "Rewrite this Python file with the same functions, adding a docstring to each:\n\n" + SOURCE
ARITHMETIC = '''def add(a, b):
    return a + b


def multiply(a, b):
    result = a * b
    return result


def divide(a, b):
    if b == 0:
        raise ValueError("division by zero")
    return a / b
'''
COPY = "Rewrite this file, adding a docstring to each function:\n\n" + ARITHMETIC  # SmolLM2 copies it as is
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "languages": {
        "type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}
PERSON = "Describe a programmer as JSON matching this schema:\n" + json.dumps(SCHEMA)


def both(model: Any, tokenizer: Any, prompt: Any, grammar: Any, max_new_tokens: int, **kw: Any) -> tuple[Any, Any]:
    plain = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=max_new_tokens, **kw)
    fast = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=max_new_tokens,
                                speculative="auto", **kw)
    return plain, fast


@pytest.mark.parametrize(("request_text", "grammar", "max_new_tokens"), [
    (EDIT, None, 40),
    (COPY, "python_function", 40),
    (PERSON, SCHEMA, 40),
    ("Describe a cat as a JSON object with name, age and color.", "json", 32),
])
def test_greedy_is_token_for_token_plain_decoding(smollm2: tuple[Any, Any], request_text: str, grammar: Any,
                                                 max_new_tokens: int) -> None:
    model, tokenizer = smollm2
    plain, fast = both(model, tokenizer, chat(tokenizer, request_text), grammar, max_new_tokens)
    assert fast.token_ids == plain.token_ids
    assert fast.text == plain.text and fast.finish_reason == plain.finish_reason
    assert fast.stats.speculative.accepted_tokens <= fast.stats.speculative.drafted_tokens
    assert fast.stats.forward_passes <= plain.stats.forward_passes
    if grammar is not None and fast.finish_reason == "grammar_end" and grammar != "python_function":
        json.loads(fast.text)


def test_copying_prompt_takes_fewer_forward_passes(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    plain, fast = both(model, tokenizer, chat(tokenizer, COPY), None, 56)
    assert fast.token_ids == plain.token_ids
    assert fast.stats.speculative.accepted_tokens > 20
    assert fast.stats.forward_passes < plain.stats.forward_passes / 2


def test_batch_of_three_rows_accepting_different_lengths(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    prompts = [chat(tokenizer, COPY), chat(tokenizer, "Give me a JSON list of three fruits."), chat(tokenizer, EDIT)]
    grammars = ["python_function", "json", None]
    plain, fast = both(model, tokenizer, prompts, grammars, 32)
    for p, f in zip(plain, fast, strict=True):
        assert f.token_ids == p.token_ids
        assert f.finish_reason == p.finish_reason
    assert sum(f.stats.forward_passes for f in fast) < sum(p.stats.forward_passes for p in plain)


def test_composes_with_rpg(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    plain, fast = both(model, tokenizer, chat(tokenizer, EDIT), None, 32, repetition=RPG())
    assert fast.token_ids == plain.token_ids
    assert fast.stats.speculative.accepted_tokens > 0


def test_drafters_one_by_one_and_a_draft_model(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    prompt = chat(tokenizer, COPY)
    plain = constrained_generate(model, tokenizer, prompt, grammar="python_function", max_new_tokens=16)
    for drafter in (GrammarDrafter(), PromptLookupDrafter(), SuffixDrafter(context=(ARITHMETIC,)),
                    ModelDrafter(model, max_tokens=4)):
        fast = constrained_generate(model, tokenizer, prompt, grammar="python_function", max_new_tokens=16,
                                    speculative=drafter)
        assert fast.token_ids == plain.token_ids, drafter
    assert fast.stats.speculative.accepted_tokens > 0  # the target model drafting for itself is always right


@pytest.mark.parametrize(("request_text", "grammar"), [(PERSON, SCHEMA), (COPY, "python_function")])
def test_seeded_sampling_is_token_for_token_plain_sampling(smollm2: tuple[Any, Any], request_text: str,
                                                          grammar: Any) -> None:
    """Each position races its own keyed noise, so a seed gives the plain run's tokens whatever the
    drafts: "auto" (whose lengths follow measured pass times, so differ from run to run), run twice,
    and drafters of other lengths, the target model drafting its own greedy path among them."""
    model, tokenizer = smollm2
    prompt = chat(tokenizer, request_text)
    sampled = {"grammar": grammar, "max_new_tokens": 40, "sampling": Sampling(temperature=0.8, seed=1)}
    plain = constrained_generate(model, tokenizer, prompt, **sampled)
    drafters: list[Any] = ["auto", "auto", PromptLookupDrafter(), ModelDrafter(model, max_tokens=3)]
    runs = [constrained_generate(model, tokenizer, prompt, speculative=d, **sampled) for d in drafters]
    for drafter, fast in zip(drafters, runs, strict=True):
        assert fast.token_ids == plain.token_ids, drafter
        assert fast.finish_reason == plain.finish_reason
    assert sum(r.stats.speculative.accepted_tokens for r in runs) > 0
    if grammar == SCHEMA:  # a free answer (a copy is near certain): drafts lose races, the seed decides
        assert any(r.stats.speculative.accepted_tokens < r.stats.speculative.drafted_tokens for r in runs)
        if plain.finish_reason == "grammar_end":
            assert set(json.loads(plain.text)) == {"name", "age", "languages"}
        reseeded = {**sampled, "sampling": Sampling(temperature=0.8, seed=2)}
        other = constrained_generate(model, tokenizer, prompt, **reseeded)
        assert other.token_ids != plain.token_ids


def test_seeded_sampling_in_a_batch_with_adadec(smollm2: tuple[Any, Any]) -> None:
    """A batch of three rows, each its own grammar, and AdaDec pausing a single sequence: sampled
    with a seed, speculation writes what plain decoding writes."""
    model, tokenizer = smollm2
    prompts = [chat(tokenizer, COPY), chat(tokenizer, "Give me a JSON list of three fruits."), chat(tokenizer, EDIT)]
    sampled = Sampling(temperature=0.7, seed=5)
    plain, fast = both(model, tokenizer, prompts, ["python_function", "json", None], 32, sampling=sampled)
    for p, f in zip(plain, fast, strict=True):
        assert f.token_ids == p.token_ids
    plain, fast = both(model, tokenizer, chat(tokenizer, EDIT), None, 32, sampling=Sampling(temperature=0.7, seed=5),
                       uncertainty=AdaDec(threshold=0.6, lookahead=2))
    assert plain.stats.adadec.pauses > 0
    assert fast.token_ids == plain.token_ids and fast.stats.adadec.pauses == plain.stats.adadec.pauses


@pytest.mark.parametrize(("request_text", "grammar"), [(COPY, None), (EDIT, "python_function"), (PERSON, SCHEMA)])
def test_adadec_with_speculation_is_adadec(smollm2: tuple[Any, Any], request_text: str, grammar: Any) -> None:
    """AdaDec pauses at the first verified position whose entropy reaches τ, from a KV cache with the
    later drafts masked out: the same tokens and the same pauses as AdaDec alone, never more passes."""
    model, tokenizer = smollm2
    adadec = AdaDec(threshold=0.6, lookahead=3)
    plain, fast = both(model, tokenizer, chat(tokenizer, request_text), grammar, 48, uncertainty=adadec)
    assert plain.stats.adadec.pauses > 0
    assert fast.token_ids == plain.token_ids
    assert fast.stats.adadec.pauses == plain.stats.adadec.pauses
    assert fast.stats.forward_passes <= plain.stats.forward_passes
    if request_text == COPY:  # a copy drafts well: speculation saves passes beside AdaDec's own reuse
        assert fast.stats.speculative.accepted_tokens > 0 and fast.stats.forward_passes < plain.stats.forward_passes


def test_adadec_with_speculation_in_a_batch(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    prompts = [chat(tokenizer, COPY), chat(tokenizer, EDIT)]
    plain, fast = both(model, tokenizer, prompts, None, 32, uncertainty=AdaDec(threshold=0.6, lookahead=2))
    for a, b in zip(plain, fast, strict=True):
        assert b.token_ids == a.token_ids and b.stats.adadec.pauses == a.stats.adadec.pauses


def test_rejects_an_unknown_setting(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    with pytest.raises(ValueError, match="speculative"):
        constrained_generate(model, tokenizer, "x", max_new_tokens=2, speculative="fast")
