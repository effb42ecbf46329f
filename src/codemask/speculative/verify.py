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
    """What a verification pass costs, relative to a one-token pass: ``1 + s + r·(n - 1)`` for ``n ≥ 2``
    tokens per row — a surcharge ``s`` for being wider than one token at all, and ``r`` per extra token.

    On an accelerator both are near 0 (a forward pass is memory-bound). On a CPU they are not, and the
    step is the larger part: MKL multiplies a one-row activation by a matrix-vector product and two or
    more rows by a blocked GEMM, so with Qwen2.5-Coder-0.5B on one AVX-512 core a 2-token pass costs
    1.7 one-token passes while an 8-token pass costs 1.73. They are measured per call from three kinds
    of passes — one token, ``2..narrow`` tokens, at least ``wide`` — by their median wall times
    (medians, because other processes make single passes slow at random). Until a kind has been seen
    ``samples`` times, ``prior`` stands in for ``r`` and ``s`` is taken as 0; ``r`` is capped at
    ``cap`` and ``s`` at ``step_cap`` so that a misleading start cannot stop drafting for good.
    """

    def __init__(self, prior: float = 0.1, cap: float = 0.5, narrow: int = 3, wide: int = 6, samples: int = 3,
                 window: int = 32, step_cap: float = 1.0) -> None:
        self.prior, self.cap, self.narrow, self.wide, self.min_samples = prior, cap, narrow, wide, samples
        self.step_cap = step_cap
        self.single_passes: deque[tuple[int, float]] = deque(maxlen=window)
        self.narrow_passes: deque[tuple[int, float]] = deque(maxlen=window)
        self.wide_passes: deque[tuple[int, float]] = deque(maxlen=window)

    def record(self, tokens: int, seconds: float) -> None:
        """A pass of ``tokens`` tokens per row took ``seconds``."""
        if tokens == 1:
            self.single_passes.append((tokens, seconds))
        elif tokens <= self.narrow:
            self.narrow_passes.append((tokens, seconds))
        elif tokens >= self.wide:
            self.wide_passes.append((tokens, seconds))

    def extra_token_ratio(self) -> float:
        """``r``: what each token beyond the first adds, relative to a one-token pass."""
        return self._fit()[1]

    def step_ratio(self) -> float:
        """``s``: what any pass wider than one token adds on top of ``r`` per token."""
        return self._fit()[0]

    def _fit(self) -> tuple[float, float]:
        single, narrow, wide = (_medians(kind) if len(kind) >= self.min_samples else None
                                for kind in (self.single_passes, self.narrow_passes, self.wide_passes))
        if single is None:  # the linear model through the multi-token passes, extrapolated to one token
            if narrow is None or wide is None:
                return 0.0, self.prior
            per_token = (wide[1] - narrow[1]) / (wide[0] - narrow[0])
            base = narrow[1] - per_token * (narrow[0] - 1)
            return 0.0, self.cap if base <= 0 else self._capped(per_token / base)
        one = single[1]
        if narrow is not None and wide is not None:
            r = self._capped((wide[1] - narrow[1]) / (wide[0] - narrow[0]) / one)
            return self._step(narrow, one, r), r
        if narrow is not None:
            return self._step(narrow, one, self.prior), self.prior
        if wide is not None:  # no way to tell the step from the slope: all of it on the slope
            return 0.0, self._capped((wide[1] / one - 1) / (wide[0] - 1))
        return 0.0, self.prior

    def _capped(self, r: float) -> float:
        return min(self.cap, max(0.0, r))

    def _step(self, multi: tuple[float, float], one: float, r: float) -> float:
        return min(self.step_cap, max(0.0, multi[1] / one - 1 - r * (multi[0] - 1)))


def _medians(passes: deque[tuple[int, float]]) -> tuple[float, float]:
    return statistics.median(n for n, _ in passes), statistics.median(t for _, t in passes)


@dataclass
class DraftLength:
    """An adaptive draft length for one sequence: as long as the expected gain pays for the width,
    and no draft at all when no length pays.

    Drafted tokens are modelled as confirmed independently with probability α (estimated from this
    sequence's recent drafts: a geometric run of confirmations ended by a rejection, with older
    steps decaying). A draft of K tokens then yields ``(1 - α^(K+1)) / (1 - α)`` tokens per pass and
    costs ``1 + s + r·K`` passes' worth of time (``s``, ``r`` from :class:`PassCost`); the length
    chosen maximises the ratio, between ``minimum`` and ``maximum``, and is 0 when even that ratio
    is below the 1 of a plain one-token pass. Drafts that keep failing shrink and then stop; every
    ``probe_every`` steps without a draft one is made anyway, so that α can recover.
    """

    maximum: int
    minimum: int = 1
    confirmed: float = 1.0
    rejected: float = 1.0
    decay: float = 0.5
    probe_every: int = 8
    idle: int = 0

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

    def choose(self, extra_token_ratio: float, step_ratio: float = 0.0) -> int:
        """The draft length for the next pass (0: none); ``step_ratio`` is 0 when the pass is wider
        than one token anyway (forced tokens to feed)."""
        alpha = min(self.acceptance, 0.999)

        def gain(k: int) -> float:
            return (1 - alpha ** (k + 1)) / (1 - alpha) / (1 + step_ratio + extra_token_ratio * k)

        best = max(range(self.minimum, self.maximum + 1), key=gain)
        if gain(best) < 1.0:
            self.idle += 1
            if self.idle < self.probe_every:
                return 0
        self.idle = 0
        return best
