"""The pipeline's deferred checks: a stage that masks only after the choice, and the choice made again."""

from __future__ import annotations

import math

import torch

from codemask.decoding.pipeline import Pipeline, Stage, StepLayout
from codemask.decoding.sampling import SamplingParams, SamplingSelector
from tests.decoding.test_sampling import Steps

LOGITS = [2.0, 1.5, 1.0, 0.5, 0.0, -0.5]
SCOPE = {0, 1, 2}  # the tokens the deferred mask may forbid
FORBIDDEN = {0, 2}  # what it forbids once asked


class DeferredForbid(Stage):
    """Forbids ``FORBIDDEN`` only when a row's chosen token is in ``SCOPE`` (asked at most once per row)."""

    def __init__(self) -> None:
        self.asked = 0
        self._open: set[int] = set()

    def apply(self, logits: torch.Tensor, layout: StepLayout) -> None:
        self._open = set(range(layout.num_rows))

    def recheck(self, logits: torch.Tensor, layout: StepLayout, chosen: torch.Tensor) -> list[int]:
        redo = []
        for row in sorted(self._open):
            token = int(chosen[row])
            if token in SCOPE:
                self._open.discard(row)
                self.asked += 1
                logits[row, sorted(FORBIDDEN)] = float("-inf")
                if token in FORBIDDEN:
                    redo.append(row)
        return redo


def _process(pipeline: Pipeline, rows: int) -> list[int]:
    logits = torch.tensor([LOGITS] * rows)
    return pipeline.process(logits, StepLayout.one_row_per_sequence(range(rows))).tolist()


def test_greedy_chooses_again_under_the_deferred_mask() -> None:
    stage = DeferredForbid()
    pipeline = Pipeline([stage], SamplingSelector(SamplingParams(temperature=0.0)))
    assert _process(pipeline, 3) == [1, 1, 1]  # token 0 forbidden once asked: the masked argmax
    assert stage.asked == 3


def test_no_check_when_the_choice_is_out_of_scope() -> None:
    stage = DeferredForbid()
    pipeline = Pipeline([stage], SamplingSelector(SamplingParams(temperature=0.0)))
    logits = torch.tensor([[0.0, 0.0, 0.0, 5.0, 0.0, 0.0]])
    assert pipeline.process(logits, StepLayout.one_row_per_sequence([0])).tolist() == [3]
    assert stage.asked == 0


def _sampled(stages: list[Stage], rows: int, steps: int) -> list[int]:
    written = Steps()
    pipeline = Pipeline(stages, SamplingSelector(SamplingParams(temperature=1.0), seed=11, positions=written))
    draws = []
    for step in range(steps):
        written.written = step
        draws += _process(pipeline, rows)
    return draws


class FullMask(Stage):
    """``DeferredForbid``'s mask applied up front."""

    def apply(self, logits: torch.Tensor, layout: StepLayout) -> None:
        logits[:, sorted(FORBIDDEN)] = float("-inf")


def test_sampling_keeps_the_masked_distribution() -> None:
    """Accept a draw the full mask allows, else race the same noise again under it: the frequencies
    are the softmax over the allowed tokens (4 standard errors), and tokens outside the scope are
    never asked about."""
    stage = DeferredForbid()
    draws = _sampled([stage], 4000, 10)
    allowed = [i for i in range(len(LOGITS)) if i not in FORBIDDEN]
    total = sum(math.exp(LOGITS[i]) for i in allowed)
    n = len(draws)
    for token in range(len(LOGITS)):
        expected = math.exp(LOGITS[token]) / total if token in allowed else 0.0
        seen = draws.count(token) / n
        assert abs(seen - expected) <= 4 * math.sqrt(max(expected * (1 - expected), 1e-12) / n), (token, seen, expected)
    in_scope = sum(math.exp(LOGITS[i]) for i in SCOPE) / sum(math.exp(x) for x in LOGITS)
    assert abs(stage.asked / n - in_scope) < 0.02  # asked only where the first draw fell in scope


def test_a_deferred_mask_samples_the_tokens_the_full_mask_would() -> None:
    """Token for token, not only in distribution: the same seed and positions with the mask applied
    up front choose what the deferred check and the choice made again choose."""
    deferred = DeferredForbid()
    assert _sampled([deferred], 500, 4) == _sampled([FullMask()], 500, 4)
    assert deferred.asked > 0


def test_subset_layout_keeps_sequences_offsets_and_drafts() -> None:
    layout = StepLayout.verification({0: (5, 6), 1: (7,)})
    sub = layout.subset([4, 1])
    assert sub.sequences == (1, 0) and sub.offsets == (1, 1) and sub.drafts == layout.drafts
