"""Token selection: greedy, temperature, top-k and top-p over masked logits, and the keyed noise
that makes a sampled token a function of its seed, sequence and position."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from codemask.decoding.pipeline import StepLayout
from codemask.decoding.sampling import (
    PositionNoise,
    SamplingParams,
    SamplingSelector,
    exponential_race,
    sampling_probabilities,
)

# chi-square 0.999 quantiles by degrees of freedom: a deterministic seed, so no flakiness either way
CHI2_999 = {3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}


def _logits() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(4, 1000)


class Steps:
    """``positions`` for a sampling selector: every sequence has written ``written`` tokens."""

    def __init__(self) -> None:
        self.written = 0

    def __call__(self, sequence: int) -> int:
        return self.written


def _sampler(params: SamplingParams, seed: int = 0) -> tuple[SamplingSelector, Steps]:
    steps = Steps()
    return SamplingSelector(params, seed, steps), steps


def _picks(selector: SamplingSelector, steps: Steps, logits: torch.Tensor, count: int) -> list[list[int]]:
    """``count`` steps' choices over the same ``logits`` (one row per sequence)."""
    layout = StepLayout.one_row_per_sequence(range(logits.shape[0]))
    picks = []
    for step in range(count):
        steps.written = step
        picks.append(selector.select(logits, layout).tolist())
    return picks


def test_greedy_is_argmax_and_needs_no_positions() -> None:
    logits = _logits()
    picked = SamplingSelector(SamplingParams()).select(logits, StepLayout.one_row_per_sequence(range(4)))
    assert picked.tolist() == logits.argmax(-1).tolist()


def test_sampling_without_positions_or_rows_is_refused() -> None:
    """Alone (no decoding loop told it of its rows), sampling cannot key its noise by position."""
    with pytest.raises(ValueError, match="positions"):
        SamplingSelector(SamplingParams(temperature=1.0)).select(_logits(), StepLayout.one_row_per_sequence(range(4)))


def test_masked_tokens_are_never_sampled() -> None:
    logits = _logits()
    allowed = torch.zeros_like(logits, dtype=torch.bool)
    allowed[:, [3, 500, 999]] = True
    logits.masked_fill_(~allowed, float("-inf"))
    selector, steps = _sampler(SamplingParams(temperature=1.5), seed=1)
    picks = _picks(selector, steps, logits, 50)
    assert {t for row in picks for t in row} == {3, 500, 999}


def test_top_k_keeps_the_k_most_likely() -> None:
    logits = _logits()
    top3 = torch.topk(logits, 3, dim=-1).indices
    selector, steps = _sampler(SamplingParams(temperature=5.0, top_k=3), seed=2)
    seen: set[int] = set()
    for picked in _picks(selector, steps, logits, 200):
        for row, token in enumerate(picked):
            assert token in top3[row].tolist()
            if row == 0:
                seen.add(token)
    assert len(seen) == 3  # a high temperature spreads over all three


def test_top_p_keeps_the_smallest_nucleus() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    selector, steps = _sampler(SamplingParams(temperature=1.0, top_p=0.7), seed=3)
    assert {p[0] for p in _picks(selector, steps, logits, 300)} == {0, 1}  # 0.5 < 0.7 <= 0.5 + 0.3
    selector, steps = _sampler(SamplingParams(temperature=1.0, top_p=0.4), seed=3)
    assert {p[0] for p in _picks(selector, steps, logits, 50)} == {0}


@pytest.mark.parametrize("spread", [1.0, 4.0])
def test_top_p_matches_a_float64_sort(spread: float) -> None:
    """The nucleus against numpy's: sort each row in float64, keep the tokens with less than p ahead.
    A spread of 1 puts most rows' nucleus beyond the thousand candidates (the whole-row sort), 4
    within them; some rows are masked to a few hundred tokens, as a grammar does."""
    generator = torch.Generator().manual_seed(int(spread))
    logits = torch.randn(24, 30_000, generator=generator) * spread
    logits[::3, 300:] = float("-inf")
    for p in (0.5, 0.9, 0.97):
        kept = torch.isfinite(sampling_probabilities(logits, SamplingParams(temperature=1.0, top_p=p))
                              .log()).numpy()
        rows = logits.double().numpy()
        probs = np.exp(rows - rows.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        order = np.argsort(-rows, axis=-1, kind="stable")
        cumulative = np.cumsum(np.take_along_axis(probs, order, -1), -1)
        ahead = np.take_along_axis(cumulative, np.argsort(order, -1), -1) - probs
        expected = ahead < p
        borderline = np.abs(ahead - p) < 1e-5
        assert np.array_equal(kept | borderline, expected | borderline)
        assert kept.sum() > 24


@pytest.mark.parametrize("seed", [0, 1])
def test_the_race_draws_from_the_distribution(seed: int) -> None:
    """Each position's race over fixed probabilities (with zeros: a grammar mask), many positions
    and sequences: the frequencies pass a chi-square test and no zero-probability token wins."""
    logits = torch.tensor([2.0, 0.5, 1.0, float("-inf"), -1.0, 0.0, float("-inf"), 1.5])
    rows = 100
    selector, steps = _sampler(SamplingParams(temperature=0.8), seed=seed)
    picks = _picks(selector, steps, logits.expand(rows, -1), 60)
    counts = torch.bincount(torch.tensor(picks).flatten(), minlength=len(logits)).float()
    probs = torch.softmax(logits / 0.8, dim=-1)
    support = probs > 0
    assert counts[~support].sum() == 0
    expected = probs[support] * counts.sum()
    chi_square = float(((counts[support] - expected) ** 2 / expected).sum())
    assert chi_square < CHI2_999[int(support.sum()) - 1]


def test_a_token_is_a_function_of_seed_sequence_and_position() -> None:
    """The same (seed, sequence, position) gives the same token whatever was drawn before it, in
    whatever order; another seed, sequence or position draws afresh."""
    logits = _logits()
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=50)
    selector, steps = _sampler(params, seed=7)
    forward = _picks(selector, steps, logits, 20)
    again, again_steps = _sampler(params, seed=7)
    backward = [None] * 20
    for step in reversed(range(20)):  # other positions asked first, and rows asked in another order
        again_steps.written = step
        layout = StepLayout((3, 2, 1, 0), (0, 0, 0, 0))
        backward[step] = again.select(logits[[3, 2, 1, 0]], layout).tolist()[::-1]
    assert forward == backward
    other, other_steps = _sampler(params, seed=8)
    assert _picks(other, other_steps, logits, 20) != forward
    same_logits = logits[:1].expand(4, -1)
    by_sequence = _picks(*_sampler(params, seed=7), same_logits, 20)
    assert any(len(set(row)) > 1 for row in by_sequence)  # each sequence its own draws
    assert len({tuple(row) for row in forward}) > 1  # each position its own draws


def test_a_large_vocabulary_does_not_leak_draws_to_negligible_tokens() -> None:
    """One logit 30 above 50,000 others: they hold 5e-9 of the mass, so over 3,000 positions none of
    them should win. (A noise value of 0, one float32 uniform in 2**24, had made its token win
    regardless: about nine of these positions.)"""
    logits = torch.zeros(1, 50_000)
    logits[0, 123] = 30.0
    selector, steps = _sampler(SamplingParams(temperature=1.0), seed=4)
    picks = _picks(selector, steps, logits, 3000)
    assert {p[0] for p in picks} == {123}


def test_noise_is_exponential_and_positive() -> None:
    noise = PositionNoise(5).draw([(0, i) for i in range(200)], 500, torch.device("cpu"))
    assert bool((noise > 0).all())
    assert abs(float(noise.mean()) - 1.0) < 0.01 and abs(float(noise.var()) - 1.0) < 0.03
    assert torch.equal(noise[3], PositionNoise(5).draw([(0, 3)], 500, torch.device("cpu"))[0])


def test_a_seed_that_is_not_an_integer_is_refused() -> None:
    with pytest.raises(TypeError, match="seed must be an int, got '7'"):
        SamplingSelector(SamplingParams(temperature=1.0), seed="7", positions=Steps())  # type: ignore[arg-type]
    assert PositionNoise(np.int64(7)).seed == PositionNoise(7).seed  # integer types are ints


def test_unseeded_noise_follows_torchs_global_seed() -> None:
    torch.manual_seed(123)
    first = PositionNoise().seed
    torch.manual_seed(123)
    assert PositionNoise().seed == first


def test_a_zero_probability_token_never_wins_even_against_the_smallest_noise() -> None:
    probs = torch.tensor([[0.0, 0.25, 0.75]])
    noise = torch.tensor([[2.0**-25, 2.0, 16.7]])
    assert exponential_race(probs, noise).tolist() == [1]


@pytest.mark.parametrize("kwargs", [{"temperature": -1.0}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_bad_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)  # type: ignore[arg-type]
