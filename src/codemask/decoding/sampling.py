"""Choosing the next token from (masked) logits: greedy, or sampling with temperature, top-k, top-p.

All of it runs on the logits' device over whole rows at once. Tokens a grammar forbids hold
``-inf`` and so get probability zero under every setting here; top-k and top-p are applied after
masking, so they choose among allowed tokens only (the order XGrammar and vLLM use).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from codemask.decoding.pipeline import Selector, StepLayout


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is picked. ``temperature == 0`` is greedy (argmax, first index on ties)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def select_tokens(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """One token id per row of ``[rows, vocab]`` logits (a long tensor on the logits' device)."""
    if params.greedy:
        return logits.argmax(dim=-1)
    return torch.multinomial(sampling_probabilities(logits, params), 1, generator=generator).squeeze(-1)


def sampling_probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution ``select_tokens`` samples from (temperature, then top-k, then top-p), per row.

    Public because speculative sampling needs the probabilities themselves, not one draw.
    """
    if params.greedy:
        raise ValueError("greedy decoding has no sampling distribution (temperature is 0)")
    scaled = logits.float() / params.temperature
    if params.top_k:
        scaled = _keep_top_k(scaled, params.top_k)
    if params.top_p < 1.0:
        scaled = _keep_top_p(scaled, params.top_p)
    return torch.softmax(scaled, dim=-1)


def _keep_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def _keep_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probability reaches ``p`` (at least one)."""
    ordered, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(ordered, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs  # probability mass strictly ahead of each token
    ordered = ordered.masked_fill(before >= p, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, ordered)


class SamplingSelector(Selector):
    """The plain :class:`~codemask.decoding.pipeline.Selector`: greedy or sampled, per ``SamplingParams``."""

    def __init__(self, params: SamplingParams, generator: torch.Generator | None = None) -> None:
        self.params = params
        self.generator = generator

    def select(self, logits: torch.Tensor, layout: StepLayout) -> torch.Tensor:
        return select_tokens(logits, self.params, self.generator)
