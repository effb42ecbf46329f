"""The decoding pipeline: stages that act on one step's ``[rows, vocab]`` logits on the model's device.

A step of decoding is: start the stages' CPU work (:meth:`Stage.prepare`), run the model's forward
pass, let every stage edit the logits in place (:meth:`Stage.apply`), pick tokens (a
:class:`Selector`), and tell the stages what was chosen (:meth:`Stage.commit`). ``prepare`` comes
*before* the forward pass so that a stage can compute on the CPU (the grammar stage computes its
masks in a worker thread) while the accelerator — or, on a CPU, torch's own threads with the GIL
released — runs the model.

The interface is shaped by what must plug into it:

- **Several rows per sequence.** A :class:`StepLayout` maps each logits row to a sequence and a
  draft offset. Plain decoding has one row per sequence at offset 0; speculative verification
  scores K drafted tokens in one forward and has K+1 rows per sequence, row ``j`` standing for the
  state after the first ``j`` drafts. A stage computes each row for the state it stands for.
- **Vetoes and re-ranking.** Stages only edit logits; the choice itself is a :class:`Selector`, which
  may look ahead (AdaDec rolls candidates out through a callback the decoding loop provides) and
  may use any logits the stages produced.
- **External state.** A stage owns whatever it needs (a matcher per sequence, a connection to a
  language server): it learns every accepted token through ``commit`` and every undone one through
  ``rollback``, and decides itself when to degrade (a monitor whose server stalls applies nothing).
- **Sequences come and go.** Sequences join the batch between steps (``admit``) and leave it
  (``retire``, after ``record`` wrote the stage's section of their stats): a stage keeps its
  per-sequence state in batch order and drops what leaves.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from codemask.decoding.row import Row
from codemask.decoding.stats import GenerationStats


@dataclass(frozen=True)
class StepLayout:
    """Which logits row stands for which sequence, after how many drafted tokens.

    Attributes:
        sequences: per row, the index of its sequence in the batch.
        offsets: per row, how many of its sequence's drafted tokens come before it (0 in plain decoding).
        drafts: per sequence index, the drafted token ids being verified this step (absent: none).
    """

    sequences: tuple[int, ...]
    offsets: tuple[int, ...]
    drafts: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.sequences) != len(self.offsets):
            raise ValueError("sequences and offsets must have one entry per row")
        for seq, offset in zip(self.sequences, self.offsets, strict=True):
            if not 0 <= offset <= len(self.drafts.get(seq, ())):
                raise ValueError(f"row offset {offset} exceeds the {len(self.drafts.get(seq, ()))} drafts of "
                                 f"sequence {seq}")

    @classmethod
    def one_row_per_sequence(cls, sequences: Sequence[int]) -> StepLayout:
        """Plain decoding: row ``r`` is sequence ``sequences[r]`` with nothing drafted."""
        return cls(tuple(sequences), (0,) * len(sequences))

    @classmethod
    def verification(cls, drafts: dict[int, Sequence[int]]) -> StepLayout:
        """Speculative verification: K+1 consecutive rows per sequence for its K drafted tokens."""
        sequences: list[int] = []
        offsets: list[int] = []
        for seq, tokens in drafts.items():
            for offset in range(len(tokens) + 1):
                sequences.append(seq)
                offsets.append(offset)
        return cls(tuple(sequences), tuple(offsets), {s: tuple(t) for s, t in drafts.items()})

    @property
    def num_rows(self) -> int:
        return len(self.sequences)

    def subset(self, rows: Sequence[int]) -> StepLayout:
        """The layout of ``rows`` of this step alone (their logits gathered in that order)."""
        return StepLayout(tuple(self.sequences[r] for r in rows), tuple(self.offsets[r] for r in rows), self.drafts)


class Stage(ABC):
    """One transformation of the logits, with whatever per-sequence state it needs."""

    def prepare(self, layout: StepLayout) -> None:  # noqa: B027 - optional hook
        """Start this step's CPU work; called just before the forward pass (default: nothing)."""

    @abstractmethod
    def apply(self, logits: torch.Tensor, layout: StepLayout) -> None:
        """Edit ``logits`` (``[layout.num_rows, vocab]``, on the model's device) in place."""

    def recheck(self, logits: torch.Tensor, layout: StepLayout, chosen: torch.Tensor) -> list[int]:
        """Rows whose chosen token a check this stage put off now forbids (default: none).

        A stage may defer a costly part of its mask to the tokens actually chosen (the monitors'
        probe for a merged ``.name`` token asks a language server): it masks those rows of
        ``logits`` in place here, and the pipeline chooses again for the rows returned. A stage
        returns a row at most once per check it deferred, so the pipeline's re-selection ends.
        """
        return []

    def commit(self, sequence: int, token_ids: Sequence[int]) -> None:  # noqa: B027 - optional hook
        """``token_ids`` were appended to ``sequence`` (default: nothing to track)."""

    def rollback(self, sequence: int, num_tokens: int) -> None:  # noqa: B027 - optional hook
        """The last ``num_tokens`` committed tokens of ``sequence`` were taken back (default: nothing)."""

    def admit(self, rows: Sequence[Row]) -> None:  # noqa: B027 - optional hook
        """``rows`` join the batch after the current sequences, in that order (default: nothing)."""

    def retire(self, sequences: Sequence[int]) -> None:  # noqa: B027 - optional hook
        """The ``sequences`` (ascending batch indices) leave; later ones move down (default: nothing)."""

    def record(self, sequence: int, stats: GenerationStats) -> None:  # noqa: B027 - optional hook
        """Write this stage's section of ``sequence``'s stats, before it leaves (default: nothing)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (threads, subprocesses); the stage is not used afterwards."""


@dataclass(frozen=True)
class Continuation:
    """A KV cache (``cache`` and its ``attention`` mask) a selector hands the decoding loop after a
    committed continuation. With ``next_logits`` (the raw ``[1, vocab]`` logits of the position after
    it) it holds every committed token, and the loop needs no forward pass for the next step;
    without, it holds all but the last committed token, which the loop feeds."""

    cache: Any
    attention: torch.Tensor
    next_logits: torch.Tensor | None = None


class Selector(ABC):
    """Picks one token per row from the processed logits (greedy, sampling, a re-ranker).

    Like a stage, a selector with per-sequence state hears of sequences joining and leaving
    (``admit``, ``retire``) and writes its section of their stats (``record``).
    """

    def admit(self, rows: Sequence[Row]) -> None:  # noqa: B027 - optional hook
        """``rows`` join the batch after the current sequences (default: nothing)."""

    def retire(self, sequences: Sequence[int]) -> None:  # noqa: B027 - optional hook
        """The ``sequences`` (ascending batch indices) leave (default: nothing)."""

    def record(self, sequence: int, stats: GenerationStats) -> None:  # noqa: B027 - optional hook
        """Write this selector's section of ``sequence``'s stats (default: nothing)."""

    @abstractmethod
    def select(self, logits: torch.Tensor, layout: StepLayout) -> torch.Tensor:
        """A long tensor of ``layout.num_rows`` token ids on the logits' device."""

    def known_continuation(self, sequence: int) -> list[int]:
        """Tokens the selector already knows it would pick after its last choice for ``sequence``
        (the loop may commit them with that choice); asking forgets them. Default: none."""
        return []

    def continuation_cache(self, sequence: int, committed: Sequence[int]) -> Continuation | None:
        """A KV cache that already holds ``committed`` (the choice and its known continuation, as the
        loop committed them), for a loop that decodes ``sequence`` alone — so that it feeds at most one
        token instead of all of them. ``None`` when the selector has no such cache (the default);
        asking forgets it."""
        return None


class Pipeline:
    """Stages in order, then a selector. The decoding loop drives it; it holds no sequence state itself."""

    def __init__(self, stages: Sequence[Stage], selector: Selector) -> None:
        self.stages = list(stages)
        self.selector = selector

    def prepare(self, layout: StepLayout) -> None:
        for stage in self.stages:
            stage.prepare(layout)

    def process(self, logits: torch.Tensor, layout: StepLayout) -> torch.Tensor:
        """Apply every stage to ``logits`` in place and return the selected token per row.

        Rows a stage's deferred check forbids (:meth:`Stage.recheck`) are selected again from their
        now masked logits. Accepting a choice the full mask allows and otherwise choosing again under
        it gives the token the full mask up front would have given: greedy gets the masked argmax,
        and sampling races the same position's noise again (:mod:`codemask.decoding.sampling`), whose
        winner among the allowed tokens is the whole race's winner whenever that one is allowed.
        """
        if logits.shape[0] != layout.num_rows:
            raise ValueError(f"logits have {logits.shape[0]} rows, the layout {layout.num_rows}")
        for stage in self.stages:
            stage.apply(logits, layout)
        chosen = self.selector.select(logits, layout)
        while redo := sorted({r for stage in self.stages for r in stage.recheck(logits, layout, chosen)}):
            chosen[redo] = self.selector.select(logits[redo], layout.subset(redo))
        return chosen

    def commit(self, sequence: int, token_ids: Sequence[int]) -> None:
        for stage in self.stages:
            stage.commit(sequence, token_ids)

    def rollback(self, sequence: int, num_tokens: int) -> None:
        for stage in self.stages:
            stage.rollback(sequence, num_tokens)

    def admit(self, rows: Sequence[Row]) -> None:
        for stage in self.stages:
            stage.admit(rows)
        self.selector.admit(rows)

    def retire(self, sequences: Sequence[int], stats: Sequence[GenerationStats]) -> None:
        """Record every stage's section of the leaving sequences' ``stats``, then let them go."""
        for sequence, row_stats in zip(sequences, stats, strict=True):
            for stage in self.stages:
                stage.record(sequence, row_stats)
            self.selector.record(sequence, row_stats)
        for stage in self.stages:
            stage.retire(sequences)
        self.selector.retire(sequences)

    def close(self) -> None:
        for stage in self.stages:
            stage.close()


T = TypeVar("T")


def without(items: list[T], sequences: Sequence[int]) -> list[T]:
    """``items`` (one per sequence, in batch order) without those of the leaving ``sequences``."""
    leaving = set(sequences)
    return [item for i, item in enumerate(items) if i not in leaving]


def reindexed(by_sequence: dict[int, T], sequences: Sequence[int]) -> dict[int, T]:
    """A dict keyed by batch index after ``sequences`` left: their entries dropped, later keys moved down."""
    leaving = sorted(sequences)
    return {i - bisect.bisect_left(leaving, i): v for i, v in by_sequence.items() if i not in set(leaving)}
