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

from codemask.decoding.pipeline import Stage, StepLayout
from codemask.repetition.config import RPG
from codemask.repetition.state import Penalties, RepetitionState


def apply_penalties_(logits: torch.Tensor, penalties: Sequence[Penalties], rpg: RPG,
                     stop_token_ids: Sequence[int]) -> None:
    """Apply each row's :class:`Penalties` to ``logits`` (``[rows, vocab]``, any device) in place.

    The host sends one small tensor per step (rows, token ids and amounts packed together): on an
    accelerator each host-to-device copy is a synchronisation, and three of them cost more than the
    arithmetic. With :attr:`RPG.eos_transfer` the probability the decay takes from a row's
    ``end_from`` token goes to the first of ``stop_token_ids`` (list the model's own end-of-sequence
    first: see :func:`~codemask.compilers.ordered_stop_token_ids`), unless a mask forbids it.
    """
    edits = _edits(logits.shape[-1], penalties, rpg, stop_token_ids)
    if edits is None:
        return
    rows, ids, amounts, moves = edits
    n = len(rows)
    flat_moves = [value for move in moves for value in move]
    packed = torch.tensor(rows + ids + amounts + flat_moves, dtype=torch.float32)  # ids below 2^24: exact
    packed = packed.to(logits.device, non_blocking=logits.device.type != "cpu")
    index = (packed[:n].long(), packed[n:2 * n].long())
    moved = None
    if moves:  # the critical tokens' mass that the decay removes, read before the decay
        move = packed[3 * n:].view(-1, 3)
        move_rows, critical = move[:, 0].long(), move[:, 1].long()
        moved = logits[move_rows, critical].float() + torch.log1p(-torch.pow(rpg.penalty, move[:, 2]))
    logits.index_put_(index, packed[2 * n:3 * n].to(logits.dtype), accumulate=True)
    if moved is not None:
        _give_to_stop_(logits, move_rows, moved, next(t for t in stop_token_ids if t < logits.shape[-1]))


def _edits(vocab: int, penalties: Sequence[Penalties], rpg: RPG, stop_token_ids: Sequence[int]
           ) -> tuple[list[float], list[float], list[float], list[tuple[float, float, float]]] | None:
    """The additive edits (row, token, log-amount) and the transfers (row, critical token, count); None if none."""
    rows: list[float] = []
    ids: list[float] = []
    amounts: list[float] = []
    moves: list[tuple[float, float, float]] = []
    log_penalty, log_boost = math.log(rpg.penalty), math.log(rpg.eos_boost)
    stops = [t for t in stop_token_ids if t < vocab]
    for row, p in enumerate(penalties):
        for token, count in p.decay.items():
            if token < vocab:
                rows.append(row)
                ids.append(token)
                amounts.append(count * log_penalty)
        if p.eos and log_boost:
            for token in stops:
                rows.append(row)
                ids.append(token)
                amounts.append(p.eos * log_boost)
        if rpg.eos_transfer and stops and p.end_from is not None and p.end_from < vocab and log_penalty:
            moves.append((row, p.end_from, p.end_count))
    return (rows, ids, amounts, moves) if rows else None


def _give_to_stop_(logits: torch.Tensor, rows: torch.Tensor, moved: torch.Tensor, stop: int) -> None:
    """Add ``exp(moved)`` (per row, in the logits' unnormalised scale) to token ``stop`` of each row.

    A stop token at ``-inf`` (a grammar or monitor forbids ending here) stays there: the transfer never
    unmasks. Adding in log space, ``logaddexp(stop, moved)``, is exact whatever the normaliser.
    """
    current = logits[rows, stop].float()
    updated = torch.where(torch.isfinite(current), torch.logaddexp(current, moved), current)
    logits[rows, stop] = updated.to(logits.dtype)


class RepetitionStage(Stage):
    """RPG over a batch: one :class:`RepetitionState` per sequence, built from its prompt tokens.

    ``analysis_time_s`` is the CPU time each sequence's analysis took (parsing, repeat detection);
    ``overlap=False`` runs it in ``apply`` on the calling thread.
    """

    def __init__(self, rpg: RPG, token_bytes: Sequence[bytes], stop_token_ids: Sequence[int],
                 prompts: Sequence[Sequence[int]], *, overlap: bool = True) -> None:
        self.rpg = rpg
        self.stop_token_ids = list(stop_token_ids)
        self.states = [RepetitionState(rpg, token_bytes, prompt) for prompt in prompts]
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
            if offset:
                state = state.fork()
                state.append(layout.drafts[seq][:offset])
            result.append(state.penalties())
            self.analysis_time_s[seq] += time.thread_time() - started
        return result

    def commit(self, sequence: int, token_ids: Sequence[int]) -> None:
        self.states[sequence].append([int(t) for t in token_ids])

    def rollback(self, sequence: int, num_tokens: int) -> None:
        self.states[sequence].rollback(num_tokens)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
