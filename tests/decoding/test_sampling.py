"""Token selection: greedy, temperature, top-k and top-p over masked logits."""

from __future__ import annotations

import pytest
import torch

from codemask.decoding.sampling import SamplingParams, select_tokens


def _logits() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(4, 1000)


def test_greedy_is_argmax_and_ignores_the_generator() -> None:
    logits = _logits()
    picked = select_tokens(logits, SamplingParams(), None)
    assert picked.tolist() == logits.argmax(-1).tolist()


def test_masked_tokens_are_never_sampled() -> None:
    logits = _logits()
    allowed = torch.zeros_like(logits, dtype=torch.bool)
    allowed[:, [3, 500, 999]] = True
    logits.masked_fill_(~allowed, float("-inf"))
    generator = torch.Generator().manual_seed(1)
    for _ in range(50):
        picked = select_tokens(logits, SamplingParams(temperature=1.5), generator)
        assert set(picked.tolist()) <= {3, 500, 999}


def test_top_k_keeps_the_k_most_likely() -> None:
    logits = _logits()
    top3 = torch.topk(logits, 3, dim=-1).indices
    generator = torch.Generator().manual_seed(2)
    seen: set[int] = set()
    for _ in range(200):
        picked = select_tokens(logits, SamplingParams(temperature=5.0, top_k=3), generator)
        for row, token in enumerate(picked.tolist()):
            assert token in top3[row].tolist()
            if row == 0:
                seen.add(token)
    assert len(seen) == 3  # a high temperature spreads over all three


def test_top_p_keeps_the_smallest_nucleus() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    generator = torch.Generator().manual_seed(3)
    picks = {int(select_tokens(logits, SamplingParams(temperature=1.0, top_p=0.7), generator)) for _ in range(300)}
    assert picks == {0, 1}  # 0.5 < 0.7 <= 0.5 + 0.3
    picks = {int(select_tokens(logits, SamplingParams(temperature=1.0, top_p=0.4), generator)) for _ in range(50)}
    assert picks == {0}


def test_seeded_sampling_is_reproducible() -> None:
    logits = _logits()
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=50)
    a = [select_tokens(logits, params, torch.Generator().manual_seed(7)).tolist() for _ in range(2)]
    assert a[0] == a[1]


@pytest.mark.parametrize("kwargs", [{"temperature": -1.0}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_bad_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)  # type: ignore[arg-type]
