"""RPG as a decoding stage: the repetition decay applied to the step's logits on their device.

The decay is on probabilities: multiplying a token's probability by ``λ^count`` (before the
distribution is renormalised) is adding ``count · ln λ`` to its logit. That only ever lowers a
logit, negative or not — unlike multiplying the logit by ``λ``, which RPG's released code does and
which *raises* a negative logit towards zero. The end-of-sequence boost adds ``count · ln β`` and
receives the critical token's decayed probability (``RPG.eos_transfer``), and tokens a grammar has
already masked (``-inf``) stay masked, so the stage composes with the grammar and monitor masks that
run before it.

Each row's analysis (parse the new code, find the repeats) is CPU work of a few tens of
microseconds; :meth:`RepetitionStage.prepare` runs it in a worker thread while the model's forward
pass runs, and :meth:`RepetitionStage.apply` applies all rows' decays in one indexed add.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from codemask.decoding.pipeline import Stage, StepLayout, without
from codemask.decoding.row import Row
from codemask.decoding.stats import GenerationStats
from codemask.repetition.config import RPG
from codemask.repetition.state import Penalties, RepetitionState


def apply_penalties_(logits: torch.Tensor, penalties: Sequence[Penalties], rpg: RPG,
                     stop_token_ids: Sequence[int]) -> None:
    """Apply each row's :class:`Penalties` to ``logits`` (``[rows, vocab]``, any device) in place.

    With :attr:`RPG.eos_transfer` the probability the decay takes from a row's ``end_from`` token goes
    to the first of ``stop_token_ids`` (list the model's own end-of-sequence first: see
    :func:`~codemask.compilers.ordered_stop_token_ids`), unless a mask forbids it.

    On an accelerator the cost is kernel launches and host-device copies, not arithmetic: the host
    plans every edited position once (:class:`_EditPlan`), sends the plan as one tensor, and the
    device reads those positions in one gather and writes them back in one scatter, the transfers
    computed in between on the few values read.
    """
    plan = _EditPlan.of(logits.shape[-1], penalties, rpg, stop_token_ids)
    if not plan.rows:
        return
    n, m = len(plan.rows), len(plan.fractions)
    packed = torch.tensor(plan.rows + plan.ids + plan.amounts + plan.critical + plan.stop + plan.fractions,
                          dtype=torch.float32)  # ids below 2^24: exact
    packed = packed.to(logits.device, non_blocking=logits.device.type != "cpu")
    index = (packed[:n].long(), packed[n:2 * n].long())
    before = logits[index].float()
    after = before + packed[2 * n:3 * n]
    if m:  # logaddexp(stop, critical before its decay + log(1 - λ^g)), never onto a masked stop
        critical, stop = packed[3 * n:3 * n + m].long(), packed[3 * n + m:3 * n + 2 * m].long()
        moved = before[critical] + packed[3 * n + 2 * m:]
        current = after[stop]
        after[stop] = torch.where(torch.isfinite(current), torch.logaddexp(current, moved), current)
    logits[index] = after.to(logits.dtype)


class _EditPlan:
    """The positions one step edits, each once: ``amounts`` in log space added to ``(rows, ids)``, and per
    transfer the slots of its critical token and stop token and ``log(1 - λ^g)``, the share it moves."""

    def __init__(self) -> None:
        self.rows: list[float] = []
        self.ids: list[float] = []
        self.amounts: list[float] = []
        self.critical: list[float] = []
        self.stop: list[float] = []
        self.fractions: list[float] = []
        self._slots: dict[tuple[int, int], int] = {}

    @classmethod
    def of(cls, vocab: int, penalties: Sequence[Penalties], rpg: RPG, stop_token_ids: Sequence[int]) -> _EditPlan:
        plan = cls()
        log_penalty, log_boost = math.log(rpg.penalty), math.log(rpg.eos_boost)
        stops = [t for t in stop_token_ids if t < vocab]
        for row, p in enumerate(penalties):
            for token, count in p.decay.items():
                if token < vocab:
                    plan.add(row, token, count * log_penalty)
            if p.eos and log_boost:
                for token in stops:
                    plan.add(row, token, p.eos * log_boost)
            if rpg.eos_transfer and log_penalty and stops and p.end_from is not None and p.end_from < vocab \
                    and p.end_count:
                plan.critical.append(plan.add(row, p.end_from, 0.0))
                plan.stop.append(plan.add(row, stops[0], 0.0))
                plan.fractions.append(math.log1p(-rpg.penalty ** p.end_count))
        return plan

    def add(self, row: int, token: int, amount: float) -> int:
        """Add ``amount`` at ``(row, token)``; the position's slot."""
        slot = self._slots.setdefault((row, token), len(self.rows))
        if slot == len(self.rows):
            self.rows.append(row)
            self.ids.append(token)
            self.amounts.append(0.0)
        self.amounts[slot] += amount
        return slot


class RepetitionStage(Stage):
    """RPG over a batch: one :class:`RepetitionState` per sequence, built from its prompt tokens.

    ``analysis_time_s`` is the CPU time each sequence's analysis took (parsing, repeat detection);
    ``overlap=False`` runs it in ``apply`` on the calling thread.
    """

    def __init__(self, rpg: RPG, token_bytes: Sequence[bytes], stop_token_ids: Sequence[int],
                 prompts: Sequence[Sequence[int]] = (), *, overlap: bool = True) -> None:
        self.rpg = rpg
        self.token_bytes = token_bytes
        self.stop_token_ids = list(stop_token_ids)
        self.states: list[RepetitionState | None] = [RepetitionState(rpg, token_bytes, prompt) for prompt in prompts]
        self.analysis_time_s = [0.0] * len(self.states)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="codemask-rpg") if overlap else None
        self._pending: Future[list[Penalties]] | None = None
        self._pending_layout: StepLayout | None = None

    def prepare(self, layout: StepLayout) -> None:
        if self._pool is not None:
            self._pending = self._pool.submit(self._analyse, layout)
            self._pending_layout = layout

    def apply(self, logits: torch.Tensor, layout: StepLayout) -> None:
        if self._pending is not None and self._pending_layout is layout:
            penalties = self._pending.result()
        else:
            penalties = self._analyse(layout)
        self._pending = self._pending_layout = None
        apply_penalties_(logits, penalties, self.rpg, self.stop_token_ids)

    def _analyse(self, layout: StepLayout) -> list[Penalties]:
        """Each row's penalties; a row after ``k`` drafted tokens is analysed on a fork that took them."""
        result: list[Penalties] = []
        for seq, offset in zip(layout.sequences, layout.offsets, strict=True):
            started = time.thread_time()
            state = self.states[seq]
            if state is None:  # a sequence that asked for no repetition penalty
                result.append(Penalties())
                continue
            if offset:
                state = state.fork()
                state.append(layout.drafts[seq][:offset])
            result.append(state.penalties())
            self.analysis_time_s[seq] += time.thread_time() - started
        return result

    def commit(self, sequence: int, token_ids: Sequence[int]) -> None:
        state = self.states[sequence]
        if state is not None:
            state.append([int(t) for t in token_ids])

    def rollback(self, sequence: int, num_tokens: int) -> None:
        state = self.states[sequence]
        if state is not None:
            state.rollback(num_tokens)

    def admit(self, rows: Sequence[Row]) -> None:
        """Each row is analysed from its prompt, unless its ``extra["repetition"]`` is False."""
        for row in rows:
            wanted = row.extra.get("repetition", True)
            self.states.append(RepetitionState(self.rpg, self.token_bytes, row.prompt_ids) if wanted else None)
            self.analysis_time_s.append(0.0)

    def retire(self, sequences: Sequence[int]) -> None:
        self.states = without(self.states, sequences)
        self.analysis_time_s = without(self.analysis_time_s, sequences)

    def record(self, sequence: int, stats: GenerationStats) -> None:
        stats.repetition.analysis_time_s = self.analysis_time_s[sequence]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
