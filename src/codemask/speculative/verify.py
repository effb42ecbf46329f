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


@dataclass
class DraftLength:
    """An adaptive draft length for one sequence: grow while drafts are confirmed, shrink when not.

    A fully confirmed draft doubles the next one (up to ``maximum``); a partly confirmed one sets it
    to what was confirmed plus one (at least ``minimum``). On a CPU every drafted token widens the
    verification pass, so a sequence whose drafts keep failing drafts little.
    """

    maximum: int
    minimum: int = 2
    current: int = 4

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError(f"need 1 <= minimum <= maximum, got {self.minimum}, {self.maximum}")
        self.current = max(self.minimum, min(self.current, self.maximum))

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        if accepted >= drafted:
            self.current = min(self.maximum, 2 * self.current)
        else:
            self.current = max(self.minimum, min(self.maximum, accepted + 1))
