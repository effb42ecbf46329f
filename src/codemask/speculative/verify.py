"""Deciding what a verification pass confirms, and how long the next draft should be.

Greedy: a drafted token is confirmed when it is the argmax of the processed (masked, penalised)
logits at its position — the token plain greedy decoding would have picked there.

Sampling: the drafters here are deterministic, so the draft distribution q is one-hot on the
drafted token x. Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) accepts x with
probability min(1, p(x)/q(x)) = p(x) and otherwise samples from p with x removed. Coupling does
the same with the target's own draw: at each position the token is the winner of an exponential
race over p with that position's keyed noise (:mod:`codemask.decoding.sampling`), and x is
confirmed when it wins — with probability p(x), the same acceptance rate — while every emitted
token is the one plain sampling emits with the same seed, so its distribution is p (the processed
target: grammar mask, RPG, temperature, top-k, top-p) without a residual to draw from.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


class PassCost:
    """The wall time of a verification pass by its width (tokens per row), learnt from the passes run.

    Why by width, not a cost per extra token: on a CPU the cost of a pass is far from linear in its
    width, and its shape depends on the processor. On one 2-core machine (with AMX) a
    Qwen2.5-Coder-0.5B pass over 2, 3 or 4 tokens takes 1.06, 1.10 and 1.50 one-token passes — the
    BLAS stops streaming the fp32 weights and packs them from 4 rows on
    (``benchmarks/results/cpu_batch_cost_2threads.md``) — while on another (without AMX) 2 and 3
    rows were the expensive ones; on a GPU every width up to dozens costs about the same. A width's
    estimate is the median of its recent passes (other processes make single passes slow at random).
    A width not yet seen ``samples`` times is estimated from the nearest measured width plus
    ``prior`` one-token passes per extra token: optimistic, so that a length worth trying is tried,
    and measured.
    """

    def __init__(self, prior: float = 0.1, samples: int = 2, window: int = 16) -> None:
        if prior < 0 or not 1 <= samples <= window:
            raise ValueError(f"need prior >= 0 and 1 <= samples <= window, got {prior}, {samples}, {window}")
        self.prior, self.min_samples, self.window = prior, samples, window
        self.passes: dict[int, deque[float]] = {}
        self.measured: dict[int, float] = {}  # width -> median of its recent passes, once it has enough

    def record(self, width: int, seconds: float) -> None:
        """A pass of ``width`` tokens per row took ``seconds``."""
        recent = self.passes.setdefault(width, deque(maxlen=self.window))
        recent.append(seconds)
        if len(recent) >= self.min_samples:
            self.measured[width] = statistics.median(recent)

    def estimate(self, width: int) -> float:
        """The expected time of a pass of ``width`` tokens per row, in seconds once any width has
        been measured (before that, in one-token passes: only ratios between widths matter)."""
        measured = self.measured
        if width in measured:
            return measured[width]
        if not measured:
            return 1.0 + self.prior * (width - 1)
        below = [w for w in measured if w < width]
        nearest = max(below) if below else min(measured)
        one_token = measured.get(1, measured[nearest] / (1.0 + self.prior * (nearest - 1)))
        return measured[nearest] + one_token * self.prior * (width - nearest)


@dataclass
class DraftLength:
    """An adaptive draft length for one sequence: as long as the expected gain pays for the width.

    Drafted tokens are modelled as confirmed independently with probability α (estimated from this
    sequence's recent drafts: a geometric run of confirmations ended by a rejection, with older
    steps decaying). A draft of K tokens then yields ``(1 - α^(K+1)) / (1 - α)`` tokens per pass,
    and the pass takes ``pass_time(K)`` (from :class:`PassCost`); the length chosen maximises the
    ratio, between ``minimum`` and ``maximum``. Drafts that keep failing shrink to
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

    def choose(self, pass_time: Callable[[int], float]) -> int:
        """The draft length with the most expected tokens per unit of time; ``pass_time(k)`` is
        the expected time of the verification pass when ``k`` tokens are drafted."""
        alpha = min(self.acceptance, 0.999)

        def gain(k: int) -> float:
            return (1 - alpha ** (k + 1)) / (1 - alpha) / pass_time(k)

        return max(range(self.minimum, self.maximum + 1), key=gain)
