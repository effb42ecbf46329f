"""What one sequence's generation cost, with a section per feature.

The decoding loop fills the common counters; each stage or driver fills its own section when the
sequence leaves the loop (:meth:`~codemask.decoding.pipeline.Stage.record`), so the loop knows no
feature by name and a feature's counters stay beside its code.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GrammarStats:
    """``mask_time_s``: CPU time computing this sequence's masks; ``forced_tokens``: tokens appended
    without a step of their own (jump-forward)."""

    mask_time_s: float = 0.0
    forced_tokens: int = 0


@dataclass
class RepetitionStats:
    """``analysis_time_s``: CPU time RPG's analysis of this sequence took."""

    analysis_time_s: float = 0.0


@dataclass
class MonitorStats:
    """``steps`` a monitor triggered at, language-server ``queries``, ``timeouts`` (the step went
    unconstrained), the monitors' own wall ``time_s`` (server round-trips and masks, mostly overlapped
    with the forward pass) and how long decoding waited for them after it (``wait_s``)."""

    steps: int = 0
    queries: int = 0
    timeouts: int = 0
    time_s: float = 0.0
    wait_s: float = 0.0


@dataclass
class AdaDecStats:
    """``pauses``: steps whose entropy reached τ; ``lookahead_tokens`` fed by the rollouts and their
    wall ``lookahead_time_s``."""

    pauses: int = 0
    lookahead_tokens: int = 0
    lookahead_time_s: float = 0.0


@dataclass
class SpeculativeStats:
    """``drafted_tokens`` sent for verification and ``accepted_tokens`` of them in the output."""

    drafted_tokens: int = 0
    accepted_tokens: int = 0


@dataclass
class GenerationStats:
    """One sequence's counters: ``steps`` (tokens the model chose), ``forward_passes`` (model calls
    while the sequence was open, prefill included), ``generated_tokens``, ``wall_time_s``; and a
    section per feature: ``grammar``, ``repetition``, ``monitors``, ``adadec``, ``speculative``
    (zeros where the feature was off)."""

    prompt_tokens: int
    steps: int = 0
    forward_passes: int = 0
    generated_tokens: int = 0
    wall_time_s: float = 0.0
    grammar: GrammarStats = field(default_factory=GrammarStats)
    repetition: RepetitionStats = field(default_factory=RepetitionStats)
    monitors: MonitorStats = field(default_factory=MonitorStats)
    adadec: AdaDecStats = field(default_factory=AdaDecStats)
    speculative: SpeculativeStats = field(default_factory=SpeculativeStats)

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0
