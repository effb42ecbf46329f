"""RPG with the packaged models on CodeRepetEval prompts where greedy decoding loops."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import torch
from transformers import LogitsProcessorList

from codemask import RPG, Grammar, constrained_generate, metrics
from codemask.hf import repetition_logits_processor
from tests.data_paths import corpus_or_skip

pytestmark = pytest.mark.slow

CODEREPETEVAL = "coderepeteval/CodeGenerationBenchmarks.jsonl"  # a full corpus (tests/data_paths.py)
LOOPING = 278  # ends in a run of print(count_upper(...)) lines; SmolLM2 greedy prints count_upper('A') forever
REDEFINED = 366  # split_words defined three times; Qwen2.5-Coder writes it again and again
REWRITTEN = 406  # ends inside a second compare_one; SmolLM2 greedy finishes it, then defines compare_one again
TEMPLATED = 133  # ends at `def vowels_count2(s):`; SmolLM2 greedy goes on to vowels_count3, 4, 5 with one docstring


def coderepeteval_prompt(index: int) -> str:
    """The prompt of CodeRepetEval's row ``index``."""
    return str(json.loads(corpus_or_skip(CODEREPETEVAL).read_text().splitlines()[index])["prompt"])


@pytest.fixture(scope="module")
def prompt() -> str:
    return coderepeteval_prompt(LOOPING)


def test_rpg_ends_where_greedy_loops(smollm2: tuple[Any, Any], prompt: str) -> None:
    model, tokenizer = smollm2
    greedy = constrained_generate(model, tokenizer, prompt, max_new_tokens=64)
    rpg = constrained_generate(model, tokenizer, prompt, max_new_tokens=64, repetition=RPG())
    assert greedy.finish_reason == "length" and metrics.tr_s(greedy.text) >= 0.5, greedy.text  # the loop
    assert rpg.finish_reason == "stop", rpg.text  # ended by itself
    assert metrics.tr_s(rpg.text) < metrics.tr_s(greedy.text)
    assert 0 < rpg.stats.repetition.analysis_time_s < 0.01 * rpg.stats.steps  # < 10 ms of CPU per step


def test_a_function_written_again_under_its_name_ends_the_completion(smollm2: tuple[Any, Any]) -> None:
    """The prompt ends inside a definition of ``compare_one`` that replaces the one before it; once SmolLM2 has
    finished it, RPG ends the completion at the next top-level statement (94 tokens when measured), where
    greedy decoding defines ``compare_one`` yet again."""
    model, tokenizer = smollm2
    prompt = coderepeteval_prompt(REWRITTEN)
    greedy = constrained_generate(model, tokenizer, prompt, max_new_tokens=160)
    rpg = constrained_generate(model, tokenizer, prompt, max_new_tokens=160, repetition=RPG())
    assert greedy.finish_reason == "length" and "def compare_one" in greedy.text, greedy.text
    assert rpg.finish_reason == "stop" and "def compare_one" not in rpg.text, rpg.text
    assert metrics.compiles(prompt + rpg.text)


def test_a_function_that_copies_the_docstring_before_it_ends_the_completion(smollm2: tuple[Any, Any]) -> None:
    """The prompt ends at ``def vowels_count2(s):`` after ``vowels_count``; SmolLM2 copies its docstring into
    ``vowels_count2`` and greedy decoding goes on to ``vowels_count3``, the same docstring again. RPG counts the
    copy like a redefinition and ends the completion once ``vowels_count2`` is written."""
    model, tokenizer = smollm2
    prompt = coderepeteval_prompt(TEMPLATED)
    greedy = constrained_generate(model, tokenizer, prompt, max_new_tokens=200)
    rpg = constrained_generate(model, tokenizer, prompt, max_new_tokens=200, repetition=RPG())
    off = constrained_generate(model, tokenizer, prompt, max_new_tokens=200, repetition=RPG(copied_docstring=None))
    assert "def vowels_count3" in greedy.text and "def vowels_count3" in off.text, off.text
    assert rpg.finish_reason == "stop" and "def vowels_count3" not in rpg.text, rpg.text
    assert metrics.compiles(prompt + rpg.text)


def test_hf_processor_equals_constrained_generate(smollm2: tuple[Any, Any], prompt: str) -> None:
    model, tokenizer = smollm2
    processor = repetition_logits_processor(tokenizer, RPG(), model)
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**ids, logits_processor=LogitsProcessorList([processor]), max_new_tokens=40,
                             do_sample=False, pad_token_id=tokenizer.eos_token_id)
    theirs = [t for t in out[0, ids["input_ids"].shape[1]:].tolist() if t != tokenizer.eos_token_id]
    ours = constrained_generate(model, tokenizer, prompt, max_new_tokens=40, repetition=RPG())
    assert theirs == ours.token_ids


def test_composes_with_a_grammar(smollm2: tuple[Any, Any], prompt: str) -> None:
    model, tokenizer = smollm2
    pattern = r"\n(print\(count_upper\('[A-Za-z]{1,6}'\)\)\n){1,8}"
    grammar = Grammar.from_regex(pattern)
    plain = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=120)
    rpg = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=120, repetition=RPG())
    for result in (plain, rpg):
        assert re.fullmatch(pattern, result.text) and result.finish_reason == "grammar_end", result.text
    assert rpg.text.count("\n") <= plain.text.count("\n")
    assert metrics.tr_s(rpg.text) <= metrics.tr_s(plain.text)


def test_decayed_probability_moved_to_the_end_stops_a_loop_the_decay_alone_does_not() -> None:
    """Qwen2.5-Coder keeps rewriting ``split_words``: with the transfer to end-of-sequence it stops — once it
    has finished the prompt's last redefinition (32 tokens when measured; 124, a copy or two later, before
    the redefinition rule); without the transfer, the decay only changes the copies' details."""
    from codemask.assets import load_model, load_tokenizer

    model, tokenizer = load_model("qwen-coder"), load_tokenizer("qwen-coder")
    prompt = coderepeteval_prompt(REDEFINED)
    ended = constrained_generate(model, tokenizer, prompt, max_new_tokens=160, repetition=RPG())
    looping = constrained_generate(model, tokenizer, prompt, max_new_tokens=160, repetition=RPG(eos_transfer=False))
    assert ended.finish_reason == "stop" and metrics.compiles(prompt + ended.text), ended.text
    assert looping.finish_reason == "length", looping.text
    assert ended.text.count("def split_words") < looping.text.count("def split_words")
