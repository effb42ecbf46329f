"""Deciding what a verification pass confirms, and how long the next draft should be.

Greedy: a drafted token is confirmed when it is the argmax of the processed (masked, penalised)
logits at its position — the token plain greedy decoding would have picked there.

Sampling: the drafters here are deterministic, so the draft distribution q is one-hot on the
drafted token x. Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) then accepts x with
probability min(1, p(x)/q(x)) = p(x), and on rejection samples from the residual max(p - q, 0),
which is p with x removed, renormalised. Every emitted token is distributed exactly as p — the
processed target distribution (grammar mask, RPG, temperature, top-k, top-p) — because
P(y) = p(x)·[y = x] + (1 - p(x)) · p(y)/(1 - p(x)) · [y ≠ x] = p(y).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

import torch


def accept_or_resample(probs: torch.Tensor, draft: int | None, generator: torch.Generator | None,
                       uniform: float | None = None) -> tuple[int, bool]:
    """One position of speculative sampling: ``(token, whether the drafted token was kept)``.

    ``probs`` is the target's distribution at this position (1-D, sums to 1); ``draft`` the token a
    deterministic drafter proposed (None: nothing drafted, sample from ``probs``). ``uniform`` is the
    acceptance draw if the caller drew it already (one host sync for a whole draft).
    """
    if draft is None:
        return int(torch.multinomial(probs, 1, generator=generator)), False
    p = float(probs[draft])
    if uniform is None:
        uniform = float(torch.rand((), generator=generator, device=probs.device))
    if uniform < p:
        return draft, True
    residual = probs.clone()
    residual[draft] = 0.0
    if float(residual.sum()) <= 0.0:  # p(x) == 1 up to rounding: nothing else can be drawn
        return draft, True
    return int(torch.multinomial(residual, 1, generator=generator)), False


class PassCost:
    """What one more token in a verification pass costs, relative to a one-token pass (``r``).

    On an accelerator it is near 0 (a forward pass is memory-bound); on two CPU cores, or with a
    150k-token LM head evaluated at every drafted position, it is not. It is measured, per call:
    the median wall time of narrow passes (at most ``narrow`` tokens per row) against that of wide
    ones (at least ``wide``); medians, because other processes make single passes slow at random.
    Until both kinds have been seen ``samples`` times, ``prior`` is the answer; the estimate is capped
    at ``cap`` so that a misleading start cannot pin the drafts at length 1 (which would never
    produce the wide passes that correct it).
    """

    def __init__(self, prior: float = 0.1, cap: float = 0.5, narrow: int = 2, wide: int = 6, samples: int = 3,
                 window: int = 32) -> None:
        self.prior, self.cap, self.narrow, self.wide, self.min_samples = prior, cap, narrow, wide, samples
        self.narrow_passes: deque[tuple[int, float]] = deque(maxlen=window)
        self.wide_passes: deque[tuple[int, float]] = deque(maxlen=window)

    def record(self, tokens: int, seconds: float) -> None:
        """A pass of ``tokens`` tokens per row took ``seconds``."""
        if tokens <= self.narrow:
            self.narrow_passes.append((tokens, seconds))
        elif tokens >= self.wide:
            self.wide_passes.append((tokens, seconds))

    def extra_token_ratio(self) -> float:
        if min(len(self.narrow_passes), len(self.wide_passes)) < self.min_samples:
            return self.prior
        narrow_tokens, narrow_time = _medians(self.narrow_passes)
        wide_tokens, wide_time = _medians(self.wide_passes)
        per_token = (wide_time - narrow_time) / (wide_tokens - narrow_tokens)
        base = narrow_time - per_token * (narrow_tokens - 1)  # a one-token pass
        if base <= 0:
            return self.cap
        return min(self.cap, max(0.0, per_token / base))


def _medians(passes: deque[tuple[int, float]]) -> tuple[float, float]:
    return statistics.median(n for n, _ in passes), statistics.median(t for _, t in passes)


@dataclass
class DraftLength:
    """An adaptive draft length for one sequence: as long as the expected gain pays for the width.

    Drafted tokens are modelled as confirmed independently with probability α (estimated from this
    sequence's recent drafts: a geometric run of confirmations ended by a rejection, with older
    steps decaying). A draft of K tokens then yields ``(1 - α^(K+1)) / (1 - α)`` tokens per pass and
    costs ``1 + r·K`` passes' worth of time (``r`` from :class:`PassCost`); the length chosen
    maximises the ratio, between ``minimum`` and ``maximum``. Drafts that keep failing shrink to
    ``minimum``; long confirmed runs grow to ``maximum`` as fast as α rises.
    """

    maximum: int
    minimum: int = 1
    confirmed: float = 1.0
    rejected: float = 1.0
    decay: float = 0.5

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError(f"need 1 <= minimum <= maximum, got {self.minimum}, {self.maximum}")

    @property
    def acceptance(self) -> float:
        return self.confirmed / (self.confirmed + self.rejected)

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.confirmed = self.decay * self.confirmed + accepted
        self.rejected = self.decay * self.rejected + (1 if accepted < drafted else 0)

    def choose(self, extra_token_ratio: float) -> int:
        alpha = min(self.acceptance, 0.999)

        def gain(k: int) -> float:
            return (1 - alpha ** (k + 1)) / (1 - alpha) / (1 + extra_token_ratio * k)

        return max(range(self.minimum, self.maximum + 1), key=gain)
