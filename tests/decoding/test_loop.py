"""The decoding loop: sequences join and leave between steps, and each writes what it writes alone."""

from __future__ import annotations

from typing import Any

import pytest

from codemask.decoding.loop import DecodingLoop
from codemask.decoding.row import Row, RowOptions
from codemask.generate import compiler_of, decoding_loop, new_row

pytestmark = pytest.mark.slow

PROMPTS = ["Write a Python function that adds two numbers.", "List three colours as JSON."]
GRAMMARS = [None, "json"]


def alone(model: Any, tokenizer: Any, index: int, tokens: int) -> list[int]:
    loop = decoding_loop(model, tokenizer)
    row = new_row(tokenizer, compiler_of(model, tokenizer), [{"role": "user", "content": PROMPTS[index]}],
                  GRAMMARS[index], RowOptions(tokens))
    loop.admit([row])
    loop.run()
    return row.token_ids


def test_a_sequence_joining_halfway_leaves_both_outputs_unchanged(smollm2: tuple[Any, Any]) -> None:
    """Greedy: the second sequence joins after the first wrote 12 tokens; both are token for token
    what each writes alone, and the loop empties once both are done."""
    model, tokenizer = smollm2
    expected = [alone(model, tokenizer, i, 30) for i in range(2)]
    loop = decoding_loop(model, tokenizer)
    compiler = compiler_of(model, tokenizer)
    first = new_row(tokenizer, compiler, [{"role": "user", "content": PROMPTS[0]}], GRAMMARS[0], RowOptions(30))
    second = new_row(tokenizer, compiler, [{"role": "user", "content": PROMPTS[1]}], GRAMMARS[1], RowOptions(30))
    loop.admit([first])
    while len(first.token_ids) < 12:
        loop.step()
    loop.admit([second])
    assert len(loop.rows) == 2
    finished: list[Row] = []
    while loop.rows:
        finished += loop.step()
    assert {id(r) for r in finished} == {id(first), id(second)}
    assert first.token_ids == expected[0]
    assert second.token_ids == expected[1]
    assert loop.cache is None  # every row left; the cache went with them


def test_a_cancelled_sequence_leaves_at_the_next_step(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    expected = alone(model, tokenizer, 0, 24)
    loop = decoding_loop(model, tokenizer)
    compiler = compiler_of(model, tokenizer)
    keep = new_row(tokenizer, compiler, [{"role": "user", "content": PROMPTS[0]}], None, RowOptions(24))
    drop = new_row(tokenizer, compiler, [{"role": "user", "content": PROMPTS[1]}], "json", RowOptions(24))
    loop.admit([keep, drop])
    for _ in range(3):
        loop.step()
    loop.cancel(drop)
    written = len(drop.token_ids)
    left = loop.step()
    assert drop in left and drop.finish_reason == "cancelled" and len(drop.token_ids) == written
    assert loop.rows == [keep]
    loop.run()
    assert keep.token_ids == expected and keep.finish_reason in ("stop", "length")
    assert drop.stats.grammar.mask_time_s > 0 and keep.stats.wall_time_s > 0


def test_rows_bring_their_own_sampling(smollm2: tuple[Any, Any]) -> None:
    """A row's own seed and temperature (a server request's) decide its tokens, whoever shares the batch."""
    from codemask.decoding.sampling import SamplingParams

    model, tokenizer = smollm2
    sampled = {"sampling": (SamplingParams(temperature=1.0), 3)}

    def run(*rows: Row) -> None:
        loop.admit(list(rows))
        loop.run()

    compiler = compiler_of(model, tokenizer)
    loop = decoding_loop(model, tokenizer)
    solo = new_row(tokenizer, compiler, PROMPTS[1], None, RowOptions(16), **sampled)
    run(solo)
    loop = decoding_loop(model, tokenizer)
    greedy = new_row(tokenizer, compiler, PROMPTS[0], None, RowOptions(16))
    shared = new_row(tokenizer, compiler, PROMPTS[1], None, RowOptions(16), **sampled)
    run(greedy, shared)
    assert shared.token_ids == solo.token_ids
    assert isinstance(loop, DecodingLoop)
