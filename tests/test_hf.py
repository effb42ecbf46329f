"""`codemask.hf`: the grammar as a logits processor for `model.generate` with the packaged SmolLM2."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from transformers import LogitsProcessorList

from codemask import Grammar, MatcherError, constrained_generate
from codemask.hf import grammar_logits_processor
from tests.conftest import chat

pytestmark = pytest.mark.slow


def _generate(model: Any, tokenizer: Any, prompts: list[str], processor: Any, **kwargs: Any) -> list[str]:
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = model.generate(**batch, logits_processor=LogitsProcessorList([processor]), **kwargs)
    return [tokenizer.decode(row[batch["input_ids"].shape[1]:], skip_special_tokens=True) for row in out]


def test_greedy_equals_constrained_generate(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    prompt = chat(tokenizer, "Describe a dog as JSON with name and breed.")
    processor = grammar_logits_processor(tokenizer, "json", model)
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**ids, logits_processor=LogitsProcessorList([processor]), max_new_tokens=60,
                             do_sample=False)
    theirs = [t for t in out[0, ids["input_ids"].shape[1]:].tolist() if t != tokenizer.eos_token_id]
    ours = constrained_generate(model, tokenizer, prompt, grammar="json", max_new_tokens=60, jump_forward=False)
    assert theirs == ours.token_ids
    json.loads(tokenizer.decode(theirs))


def test_sampling_beam_search_and_batches_parse(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    processor = grammar_logits_processor(tokenizer, Grammar.from_regex(r"(red|green|blue)(, (red|green|blue)){2}"),
                                         model)
    prompts = [chat(tokenizer, "Name three colors."), chat(tokenizer, "What colors does a flag have?")]
    settings: list[dict[str, Any]] = [
        {"do_sample": False},
        {"do_sample": True, "temperature": 1.2, "top_p": 0.95},
        {"do_sample": False, "num_beams": 3},
    ]
    for kwargs in settings:  # one processor, reused across calls
        for text in _generate(model, tokenizer, prompts, processor, max_new_tokens=16, **kwargs):
            parts = text.split(", ")
            assert len(parts) == 3 and set(parts) <= {"red", "green", "blue"}, (kwargs, text)


def test_a_token_the_grammar_refuses_is_reported(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    processor = grammar_logits_processor(tokenizer, Grammar.from_regex("[0-9]+"), model)
    prompt = tokenizer("Count:", return_tensors="pt")["input_ids"]
    processor(prompt, torch.zeros(1, model.config.vocab_size))
    letter = tokenizer.encode("x", add_special_tokens=False)[0]
    continued = torch.cat([prompt, torch.tensor([[letter]])], dim=1)
    with pytest.raises(MatcherError, match="refuses token"):
        processor(continued, torch.zeros(1, model.config.vocab_size))
