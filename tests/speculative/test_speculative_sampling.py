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
    assert length.choose(0.1) <= 4  # no evidence yet: short drafts
    for _ in range(6):
        length.update(8, 8)
    assert length.choose(0.1) == 16  # long confirmed runs: the maximum
    assert length.choose(0.0) == 16 and length.choose(1.0) < 16  # a costly width drafts less
    for _ in range(6):
        length.update(4, 0)
    assert length.choose(0.1) == 1  # drafts keep failing: the minimum
    length.update(0, 0)
    assert length.choose(0.1) == 1


def test_pass_cost_compares_median_narrow_and_wide_passes() -> None:
    cost = PassCost(prior=0.25)
    assert cost.extra_token_ratio() == 0.25
    for tokens in (1, 2, 1, 8, 8, 8):
        cost.record(tokens, 0.1 + 0.02 * (tokens - 1))
    cost.record(8, 9.0)  # a pass slowed down by another process: the median ignores it
    assert abs(cost.extra_token_ratio() - 0.2) < 1e-9
    spiky = PassCost()
    for tokens, seconds in ((1, 0.1), (1, 0.1), (1, 0.1), (8, 5.0), (8, 5.0), (8, 5.0)):
        spiky.record(tokens, seconds)
    assert spiky.extra_token_ratio() == spiky.cap
