"""The grammar stage: one packed bitmask upload and one in-place apply per step.

Masks are computed on the CPU by each sequence's :class:`~codemask.engine.matcher.GrammarMatcher`
in a worker thread started by :meth:`GrammarStage.prepare`, i.e. while the forward pass runs (torch
releases the GIL inside its kernels). :meth:`GrammarStage.apply` waits for them, copies the filled
rows of a pinned host bitmask to the device with ``non_blocking=True`` and masks the logits in
place. Rows of sequences without a grammar are not touched.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from codemask.decoding.json_items import ItemScanner, SeparatorTokens, decay_repeated_item_
from codemask.decoding.pipeline import Stage, StepLayout, without
from codemask.decoding.row import Row
from codemask.decoding.stats import GenerationStats
from codemask.engine.bitmask import allocate_token_bitmask, apply_token_bitmask_
from codemask.engine.matcher import GrammarMatcher
from codemask.errors import MatcherError


class GrammarStage(Stage):
    """Grammar masks for a batch in which each sequence has its own matcher, or none.

    ``overlap=False`` computes masks in ``apply`` on the calling thread (simpler to profile; the
    masks are identical either way).
    """

    def __init__(self, matchers: Sequence[GrammarMatcher | None], vocab_size: int, *, overlap: bool = True,
                 item_penalties: Sequence[float | None] | None = None) -> None:
        self.matchers: list[GrammarMatcher | None] = list(matchers)
        self.vocab_size = vocab_size
        # JSON grammars' repeated-item decay (`codemask.decoding.json_items`): a scanner per such sequence
        self.item_penalties = list(item_penalties or [None] * len(self.matchers))
        self.scanners = [ItemScanner() if p is not None and m is not None else None
                         for p, m in zip(self.item_penalties, self.matchers, strict=True)]
        self.mask_time_s = [0.0] * len(self.matchers)
        self.invalid_rows: set[int] = set()
        self._bitmask = allocate_token_bitmask(max(len(self.matchers), 1), vocab_size, pin_memory=True)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="codemask-mask") if overlap else None
        self._pending: Future[list[int]] | None = None
        self._pending_layout: StepLayout | None = None

    def matcher(self, sequence: int) -> GrammarMatcher | None:
        return self.matchers[sequence]

    # -- the step ----------------------------------------------------------------------------

    def prepare(self, layout: StepLayout) -> None:
        if self._pool is None:
            return
        self._pending = self._pool.submit(self._fill, layout)
        self._pending_layout = layout

    def apply(self, logits: torch.Tensor, layout: StepLayout) -> None:
        if self._pending is not None and self._pending_layout is layout:
            rows = self._pending.result()
        else:
            rows = self._fill(layout)
        self._pending = self._pending_layout = None
        if not rows:
            return
        host = self._bitmask[: layout.num_rows]
        device_mask = host.to(logits.device, non_blocking=True) if logits.device.type != "cpu" else host
        apply_token_bitmask_(logits, device_mask, indices=rows, vocab_size=min(self.vocab_size, logits.shape[-1]))
        self._decay_repeated_items(logits, layout)

    def _decay_repeated_items(self, logits: torch.Tensor, layout: StepLayout) -> None:
        for row, (seq, offset) in enumerate(zip(layout.sequences, layout.offsets, strict=True)):
            scanner, penalty, matcher = self.scanners[seq], self.item_penalties[seq], self.matchers[seq]
            if scanner is None or penalty is None or matcher is None or row in self.invalid_rows:
                continue
            if offset:
                scanner = scanner.fork()
                for token in layout.drafts[seq][:offset]:
                    scanner.feed(matcher.compiled.vocab.token_bytes[token])
            decay_repeated_item_(logits[row], scanner, penalty, SeparatorTokens.of(matcher.compiled.vocab))

    def _fill(self, layout: StepLayout) -> list[int]:
        """Fill the host bitmask rows of constrained sequences; returns those row indices."""
        if layout.num_rows > self._bitmask.shape[0]:
            self._bitmask = allocate_token_bitmask(layout.num_rows, self.vocab_size, pin_memory=True)
        self.invalid_rows = set()
        rows: list[int] = []
        walkers: dict[int, tuple[GrammarMatcher, int]] = {}
        for row, (seq, offset) in enumerate(zip(layout.sequences, layout.offsets, strict=True)):
            matcher = self.matchers[seq]
            if matcher is None:
                continue
            started = time.perf_counter()
            if offset == 0:
                matcher.fill_next_token_bitmask(self._bitmask, row)
            else:
                self._fill_after_drafts(row, seq, offset, layout, walkers)
            self.mask_time_s[seq] += time.perf_counter() - started
            rows.append(row)
        return rows

    def _fill_after_drafts(self, row: int, seq: int, offset: int, layout: StepLayout,
                           walkers: dict[int, tuple[GrammarMatcher, int]]) -> None:
        """The mask after the first ``offset`` drafts: walk a fork of the matcher along the drafts."""
        walker, walked = walkers.get(seq) or (self.matchers[seq].fork(), 0)  # type: ignore[union-attr]
        drafts = layout.drafts[seq]
        ok = walked >= 0
        while ok and walked < offset:
            ok = not walker.is_terminated() and walker.accept_token(drafts[walked])
            walked = walked + 1 if ok else -1
        walkers[seq] = (walker, walked)
        if ok:
            walker.fill_next_token_bitmask(self._bitmask, row)
        else:
            # A draft the grammar refuses: this row and the later ones of the sequence stand for no
            # valid state. Allow everything (no NaN downstream) and report them; the verifier stops
            # before them because the refused draft can never be confirmed.
            self._bitmask[row].fill_(-1)
            self.invalid_rows.add(row)

    # -- state -------------------------------------------------------------------------------

    def commit(self, sequence: int, token_ids: Sequence[int]) -> None:
        matcher = self.matchers[sequence]
        if matcher is None:
            return
        for i, token in enumerate(token_ids):
            if matcher.is_terminated() or not matcher.accept_token(int(token)):
                matcher.rollback(i)
                raise MatcherError(f"sequence {sequence}: the grammar refuses token {int(token)} at position "
                                   f"{matcher.num_accepted + i}; tokens committed to a grammar stage must come "
                                   "from its masks")
        scanner = self.scanners[sequence]
        if scanner is not None:
            for token in token_ids:
                scanner.feed(matcher.compiled.vocab.token_bytes[int(token)])

    def rollback(self, sequence: int, num_tokens: int) -> None:
        matcher = self.matchers[sequence]
        if matcher is not None:
            matcher.rollback(num_tokens)
        scanner = self.scanners[sequence]
        if scanner is not None:
            scanner.rollback(num_tokens)

    def admit(self, rows: Sequence[Row]) -> None:
        for row in rows:
            self.matchers.append(row.matcher)
            self.item_penalties.append(row.item_penalty)
            self.scanners.append(ItemScanner() if row.item_penalty is not None and row.matcher is not None else None)
            self.mask_time_s.append(0.0)

    def retire(self, sequences: Sequence[int]) -> None:
        self.matchers = without(self.matchers, sequences)
        self.item_penalties = without(self.item_penalties, sequences)
        self.scanners = without(self.scanners, sequences)
        self.mask_time_s = without(self.mask_time_s, sequences)

    def record(self, sequence: int, stats: GenerationStats) -> None:
        stats.grammar.mask_time_s = self.mask_time_s[sequence]

    def only_stop_allowed(self, sequence: int) -> bool:
        """Whether the grammar of ``sequence`` is complete and nothing may follow but a stop token."""
        matcher = self.matchers[sequence]
        if matcher is None or not matcher.can_terminate():
            return False
        return bool(np.array_equal(matcher.next_token_bitmask(), matcher.compiled.masks.stop_words.view(np.int32)))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
