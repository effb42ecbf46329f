"""AdaDec with the packaged SmolLM2: KV-cache fork, rerank vs a cache-free oracle, composition with a grammar."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
import torch

from codemask import Grammar, GrammarMatcher, constrained_generate
from codemask.adadec import AdaDec, KVBranch, selector
from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size
from codemask.decoding import kv
from codemask.decoding.loop import DecodingLoop
from codemask.decoding.pipeline import Pipeline, StepLayout
from tests.conftest import chat

pytestmark = pytest.mark.slow

CODE_REQUEST = "Write a Python function that returns the sum of a list."


@pytest.mark.parametrize("pad", [False, True], ids=["unpadded", "padded-to-4"])
def test_kv_branch_matches_a_forward_without_cache(smollm2: tuple[Any, Any], pad: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways a CPU may run a 3-row branch (which one this machine takes is measured: row_padding)."""

    monkeypatch.setattr(selector, "padded_rows", lambda _model, rows, _device: 4 if pad and 1 < rows < 4 else rows)

    model, tokenizer = smollm2
    short, long = tokenizer("def f(x):")["input_ids"], tokenizer("import os\nclass A:\n    def g(self):")["input_ids"]
    width = max(len(short), len(long))
    ids = torch.tensor([[0] * (width - len(short)) + short, [0] * (width - len(long)) + long])
    attention = torch.tensor([[0] * (width - len(short)) + [1] * len(short),
                              [0] * (width - len(long)) + [1] * len(long)])
    _, cache = kv.run_model(model, kv.new_cache(model), input_ids=ids, attention_mask=attention,
                            position_ids=(attention.cumsum(-1) - 1).clamp(min=0))
    before = [layer.keys.clone() for layer in cache.layers]
    branch = KVBranch(model, cache, attention, [1, 0, 1])  # rows forked, one of them twice
    assert branch.attention.shape[0] == (4 if pad else 3)
    steps = [[11, 12, 13], [21, 22, 23]]
    for t, feed in enumerate(steps):
        got = branch.step(torch.tensor(feed))
        for j, row in enumerate([1, 0, 1]):
            prefix = long if row == 1 else short
            full = torch.tensor([prefix + [steps[s][j] for s in range(t + 1)]])
            with torch.inference_mode():
                want = model(input_ids=full).logits[0, -1].float()
            torch.testing.assert_close(got[j], want, atol=2e-3, rtol=1e-3)
    branch.keep([2])
    assert branch.step(torch.tensor([5])).shape[0] == 1
    for old, layer in zip(before, cache.layers, strict=True):  # the loop's cache is untouched
        assert torch.equal(old, layer.keys)


def test_infinite_threshold_is_greedy_and_zero_pauses_every_step(smollm2: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2
    prompt = chat(tokenizer, CODE_REQUEST)
    greedy = constrained_generate(model, tokenizer, prompt, max_new_tokens=12)
    never = constrained_generate(model, tokenizer, prompt, max_new_tokens=12, uncertainty=AdaDec(threshold=math.inf))
    assert never.token_ids == greedy.token_ids and never.text == greedy.text
    assert never.stats.adadec.pauses == 0 and never.stats.adadec.lookahead_tokens == 0
    always = constrained_generate(model, tokenizer, prompt, max_new_tokens=6,
                                  uncertainty=AdaDec(threshold=0.0, lookahead=2))
    assert always.stats.adadec.pauses == always.stats.steps == 6
    assert 0 < always.stats.adadec.lookahead_tokens <= 6 * 3 * 2
    assert always.stats.adadec.lookahead_time_s > 0


def _oracle_choice(model: Any, prompt_ids: list[int], beam: int, lookahead: int) -> tuple[list[float], list[int]]:
    """Mean log-probability of each top candidate + its greedy rollout, by full forwards (no cache)."""
    with torch.inference_mode():
        first = torch.log_softmax(model(input_ids=torch.tensor([prompt_ids])).logits[0, -1].float(), -1)
        top = torch.topk(first, beam)
        means = []
        for value, cand in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            seq, total = [*prompt_ids, cand], value
            for _ in range(lookahead):
                lp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0, -1].float(), -1)
                nxt = int(lp.argmax())
                total += float(lp[nxt])
                seq.append(nxt)
            means.append(total / (lookahead + 1))
    return means, top.indices.tolist()


def test_rerank_picks_the_best_mean_log_probability(smollm2: tuple[Any, Any]) -> None:
    """The oracle rolls every candidate out; the selector rolls the leader out first and a challenger
    only while it can still win — the choice must be the same, with fewer lookahead tokens somewhere."""
    model, tokenizer = smollm2
    changed = pruned = 0
    for request in ["Write a Python function that reverses a string.", "Name a prime number.",
                    "Complete: def add(a, b):", "Say hello in French.", "What is 2 + 2?"]:
        prompt = chat(tokenizer, request)
        result = constrained_generate(model, tokenizer, prompt, max_new_tokens=1,
                                      uncertainty=AdaDec(threshold=0.0, beam=3, lookahead=3))
        means, candidates = _oracle_choice(model, list(tokenizer(prompt)["input_ids"]), 3, 3)
        chosen = result.token_ids[0]
        assert chosen in candidates
        assert means[candidates.index(chosen)] == pytest.approx(max(means), abs=1e-3)
        changed += chosen != candidates[0]
        pruned += result.stats.adadec.lookahead_tokens < 3 * 3
    assert changed >= 1, "no prompt where the rerank departs from greedy: the test proves nothing"
    assert pruned >= 1, "no challenger was ever pruned: the bound is not exercised"


def test_rollouts_respect_the_grammar(smollm2: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from codemask.decoding.grammar import GrammarStage

    seen: list[tuple[StepLayout, set[int]]] = []
    original = GrammarStage.apply

    def spy(self: GrammarStage, logits: torch.Tensor, layout: StepLayout) -> None:
        original(self, logits, layout)
        seen.append((layout, set(self.invalid_rows)))

    monkeypatch.setattr(GrammarStage, "apply", spy)
    model, tokenizer = smollm2
    grammar = Grammar.from_regex(r'\{"color": "[a-z]{1,12}", "legs": [0-9]\}')
    prompt = chat(tokenizer, "Describe a cat as JSON with its color and number of legs.")
    result = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=30,
                                  uncertainty=AdaDec(threshold=0.0, lookahead=3))
    assert result.finish_reason == "grammar_end", result
    assert re.fullmatch(r'\{"color": "[a-z]{1,12}", "legs": [0-9]\}', result.text)
    json.loads(result.text)
    assert result.stats.adadec.pauses == result.stats.steps > 0
    rollout_rows = [(layout, bad) for layout, bad in seen if any(layout.offsets)]
    assert rollout_rows, "no rollout went through the grammar stage"
    # every rollout state is one the grammar reached: its drafts (candidate + lookahead) were accepted
    assert not any(bad for _, bad in rollout_rows)
    compiler = compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))
    matcher = GrammarMatcher(compiler.compile(grammar))
    assert all(matcher.accept_token(t) for t in result.token_ids) and matcher.can_terminate()


def test_calibration_on_mbpp_train_gives_a_usable_threshold(smollm2: tuple[Any, Any], tmp_path: Any) -> None:
    from codemask.adadec.calibrate import calibrate, mbpp_examples
    from tests.data_paths import TEST_DATA

    data = TEST_DATA / "mbpp" / "mbpp_train_sample.jsonl"  # tasks 601-606 of MBPP's train split
    model, tokenizer = smollm2
    examples = mbpp_examples(data)[:4]
    assert len(examples) == 4 and all("```python" in ref for _, ref in examples)
    result = calibrate(model, tokenizer, examples)
    assert result.slope > 0  # higher entropy: more likely that the reference token was not the top one
    assert 0 < result.threshold < 10 and 0 < result.pause_rate < 0.5
    assert 0 < result.positive_rate < 0.6 and result.positions > 100


@pytest.mark.parametrize("grammar", [None, "json-schema"])
def test_reused_lookahead_gives_the_same_output_in_fewer_forward_passes(smollm2: tuple[Any, Any],
                                                                      grammar: str | None) -> None:
    """The chosen candidate's rollout tokens, committed with it, are what plain AdaDec decodes next."""
    model, tokenizer = smollm2
    if grammar is None:
        prompt, spec = chat(tokenizer, CODE_REQUEST), None
    else:
        spec = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
                "items": {"type": "string"}}}, "required": ["name", "tags"]}
        prompt = chat(tokenizer, "Describe a fruit as JSON with a name and tags.")
    runs = {reuse: constrained_generate(model, tokenizer, prompt, grammar=spec, max_new_tokens=48,
                                        uncertainty=AdaDec(threshold=0.8, reuse_lookahead=reuse))
            for reuse in (False, True)}
    plain, reused = runs[False], runs[True]
    assert plain.stats.adadec.pauses >= 3  # the comparison is about something
    assert reused.token_ids == plain.token_ids and reused.text == plain.text
    assert reused.stats.adadec.pauses == plain.stats.adadec.pauses
    assert reused.stats.steps == plain.stats.steps
    assert reused.stats.forward_passes < plain.stats.forward_passes
    # a pause right after a committed continuation goes on with the chosen rollout's own tokens
    assert reused.stats.adadec.lookahead_tokens < plain.stats.adadec.lookahead_tokens


def test_a_single_sequence_continues_from_the_rollout_cache(smollm2: tuple[Any, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With one sequence the loop takes over the chosen rollout's KV cache: after the prompt it
    never feeds more than one token, though it commits several at once, and where the rollout fed
    every committed token it feeds none — and decodes the same."""
    model, tokenizer = smollm2
    prompt = chat(tokenizer, CODE_REQUEST)
    plain = constrained_generate(model, tokenizer, prompt, max_new_tokens=48,
                                 uncertainty=AdaDec(threshold=0.8, reuse_lookahead=False))
    widths: list[int] = []
    forward = DecodingLoop.forward

    def recording(self: DecodingLoop, feeds: list[list[int]], keep: int = 1) -> torch.Tensor:
        widths.append(max(len(f) for f in feeds))
        return forward(self, feeds, keep)

    processed: list[int] = []
    process = Pipeline.process

    def counting(self: Pipeline, logits: torch.Tensor, layout: StepLayout) -> torch.Tensor:
        processed.append(layout.num_rows)
        return process(self, logits, layout)

    monkeypatch.setattr(DecodingLoop, "forward", recording)
    monkeypatch.setattr(Pipeline, "process", counting)
    reused = constrained_generate(model, tokenizer, prompt, max_new_tokens=48,
                                  uncertainty=AdaDec(threshold=0.8))
    assert reused.token_ids == plain.token_ids
    assert reused.stats.steps > reused.stats.forward_passes  # continuations were committed
    assert widths[1:] and max(widths[1:]) == 1
    # some steps took their logits from the rollout that had fed every committed token
    assert len(processed) > len(widths) == reused.stats.forward_passes
