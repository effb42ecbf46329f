"""Speculative sampling keeps the target distribution: accept/resample on fixed masked logits, many draws."""

from __future__ import annotations

import pytest
import torch

from codemask.decoding.sampling import SamplingParams, sampling_probabilities
from codemask.speculative.verify import DraftLength, PassCost, accept_or_resample

# chi-square 0.999 quantiles by degrees of freedom: a deterministic seed, so no flakiness either way
CHI2_999 = {3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a token outside the target's support was drawn"
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


@pytest.mark.parametrize("draft", [0, 2, 5])
def test_accept_or_resample_draws_from_the_masked_target(draft: int) -> None:
    logits = torch.tensor([2.0, 0.5, 1.0, float("-inf"), -1.0, 0.0, float("-inf"), 1.5])  # -inf: grammar mask
    probs = sampling_probabilities(logits.unsqueeze(0), SamplingParams(temperature=0.8, top_k=5)).squeeze(0)
    generator = torch.Generator().manual_seed(1234 + draft)
    counts = torch.zeros_like(probs)
    kept = 0
    draws = 6_000
    for _ in range(draws):
        token, accepted = accept_or_resample(probs, draft, generator)
        counts[token] += 1
        kept += accepted
    support = int((probs > 0).sum())
    assert chi_square(counts, probs) < CHI2_999[support - 1]
    assert abs(kept / draws - float(probs[draft])) < 0.02  # acceptance rate is p(draft)


def test_a_draft_outside_the_support_is_always_resampled() -> None:
    probs = torch.tensor([0.5, 0.5, 0.0])
    generator = torch.Generator().manual_seed(0)
    assert all(not accept_or_resample(probs, 2, generator)[1] for _ in range(100))
    assert accept_or_resample(torch.tensor([0.0, 1.0]), 1, generator) == (1, True)


def test_draft_length_follows_acceptance_and_cost() -> None:
    length = DraftLength(maximum=16)
    assert 1 <= length.choose(0.1) <= 4  # no evidence yet: short drafts
    for _ in range(6):
        length.update(8, 8)
    assert length.choose(0.1) == 16  # long confirmed runs: the maximum
    assert length.choose(0.0) == 16 and length.choose(1.0) < 16  # a costly width drafts less
    assert length.choose(0.0, step_ratio=0.7) == 16  # a fixed surcharge is worth paying for long runs
    for _ in range(12):
        length.update(4, 0)
    # drafts keep failing: no length pays for the width, so none is drafted, but every 8th step probes
    choices = [length.choose(0.1) for _ in range(16)]
    assert choices == ([0] * 7 + [1]) * 2
    length.update(0, 0)  # a pass without a draft tells nothing
    assert length.choose(0.1) == 0


def test_a_step_in_the_cost_of_width_stops_drafts_that_confirm_little() -> None:
    """On a CPU any pass wider than one token costs ~1.7 one-token passes (MKL's GEMM against its
    matrix-vector product): a draft whose tokens are confirmed 40% of the time is then not worth
    making, though with no step it would be."""
    length = DraftLength(maximum=8)
    for _ in range(8):
        length.update(2, 0)
        length.update(2, 1)
    assert 0.3 < length.acceptance < 0.45
    assert length.choose(0.02) >= 1
    assert length.choose(0.02, step_ratio=0.7) == 0


def test_pass_cost_compares_median_narrow_and_wide_passes() -> None:
    cost = PassCost(prior=0.25)
    assert cost.extra_token_ratio() == 0.25 and cost.step_ratio() == 0.0
    for tokens in (1, 2, 1, 8, 8, 8, 1, 3, 2):
        cost.record(tokens, 0.1 + 0.02 * (tokens - 1))
    cost.record(8, 9.0)  # a pass slowed down by another process: the median ignores it
    assert abs(cost.extra_token_ratio() - 0.2) < 1e-9
    assert abs(cost.step_ratio()) < 1e-9  # linear in the width: no step
    spiky = PassCost()
    for tokens, seconds in ((1, 0.1), (1, 0.1), (1, 0.1), (8, 5.0), (8, 5.0), (8, 5.0)):
        spiky.record(tokens, seconds)
    assert spiky.extra_token_ratio() == spiky.cap


def test_pass_cost_separates_the_step_from_the_slope() -> None:
    """The shape measured on one CPU core with Qwen2.5-Coder-0.5B: 1 token 139 ms, 2 tokens 239 ms,
    8 tokens 241 ms."""
    cost = PassCost()
    for tokens, seconds in [(1, 0.139), (2, 0.239), (8, 0.241)] * 3:
        cost.record(tokens, seconds)
    assert cost.extra_token_ratio() < 0.01
    assert 0.7 < cost.step_ratio() < 0.73
    only_single_and_wide = PassCost()
    for tokens, seconds in [(1, 0.1), (7, 0.16)] * 3:
        only_single_and_wide.record(tokens, seconds)
    assert only_single_and_wide.step_ratio() == 0.0 and abs(only_single_and_wide.extra_token_ratio() - 0.1) < 1e-9
