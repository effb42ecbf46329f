"""The speculative decoding loop: draft, verify K+1 positions in one forward pass, keep what is confirmed.

It drives a :class:`~codemask.decoding.loop.DecodingLoop` (its rows, KV cache, pipeline and commit
logic) with a different step:

1. **Draft.** Each unfinished row's drafter proposes up to its adaptive length. The draft is made
   what plain decoding would write if the model confirmed it: cut at the first token the grammar
   refuses (or a stop token), and — with jump-forward — each token followed by exactly the forced
   tokens plain decoding appends after it (a context match that tokenises a forced stretch another
   way is re-spliced, or cut).
2. **Verify.** One forward pass over each row's uncached tokens plus its draft, keeping the logits
   of the last K+1 positions. The pipeline's stages see them as a
   :meth:`~codemask.decoding.pipeline.StepLayout.verification` layout — row ``j`` of a sequence is
   its state after ``j`` drafts — so the grammar stage fills K+1 masks by walking a fork of the
   matcher along the draft, and RPG analyses a fork that took the drafts.
3. **Confirm.** Walking the positions in order, the token plain decoding would pick at each one
   (the loop's own selector over the verification layout: greedy takes the argmax, sampling races
   each position's own noise, see :mod:`codemask.speculative.verify`) is committed through the
   loop's own ``advance`` (forced continuation, stop strings, length, callbacks); the walk
   continues while what was committed is what the draft holds. Output, greedy or sampled with a
   seed, is therefore token for token the output of plain decoding.
4. **Roll back.** The matcher and stages only ever saw committed tokens (the masks came from
   forks). In the KV cache, a row's rejected draft positions become holes hidden by the attention
   mask — the loop already tolerates masked holes and takes position ids from the mask — so rows of
   a batch may confirm different lengths in the same pass; trailing columns that every row rejected
   are cropped off the cache.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from codemask.decoding.pipeline import StepLayout
from codemask.decoding.row import Row
from codemask.decoding.sampling import SamplingSelector
from codemask.engine.matcher import GrammarMatcher
from codemask.speculative.drafters import DraftEnv, Drafter, DraftState, auto_drafter
from codemask.speculative.verify import DraftLength, PassCost

if TYPE_CHECKING:
    from codemask.adadec import AdaDecSelector
    from codemask.decoding.loop import DecodingLoop

_JUMP_BUDGET = 1 << 30  # while drafting, forced continuations are not cut by the token budget


def resolve_drafter(speculative: str | Drafter | None) -> Drafter | None:
    """The drafter for ``constrained_generate(speculative=...)``; None when speculation is off."""
    if speculative is None:
        return None
    if speculative == "auto":
        return auto_drafter()
    if isinstance(speculative, Drafter):
        return speculative
    raise ValueError(f"speculative must be 'auto', a Drafter or None, got {speculative!r}")


class SpeculativeRunner:
    """Runs a :class:`~codemask.decoding.loop.DecodingLoop` speculatively, through the loop's steps:
    ``forward`` (the model over new tokens), ``advance`` (commit a picked token), ``jump_forward``,
    ``bytes_of`` and ``retire_finished``. Each sequence's drafting state is kept by its row's key, so
    sequences may join (:meth:`admit`) and leave between steps as in plain decoding.

    With ``uncertainty`` (the loop's `AdaDecSelector`), the walk over a verified draft stops at the
    first position whose entropy reaches τ: the drafts from there on are masked out of the KV cache,
    so the cache holds exactly the committed sequence, and AdaDec pauses there as plain decoding would
    (its rollouts fork that cache) — AdaDec's output, with the forward passes of speculation.
    """

    def __init__(self, loop: DecodingLoop, drafter: Drafter, selector: SamplingSelector,
                 uncertainty: AdaDecSelector | None = None) -> None:
        self.loop = loop
        self.drafter = drafter
        self.selector = selector
        self.uncertainty = uncertainty
        vocab = loop.vocab
        self.stop_ids = frozenset(int(t) for t in vocab.stop_token_ids)
        self.env = DraftEnv(loop.tokenizer, vocab.token_bytes, self.stop_ids)
        self.states: dict[int, DraftState] = {}
        self.lengths: dict[int, DraftLength] = {}
        self.cost = PassCost()
        self.admit(loop.rows)

    def admit(self, rows: Sequence[Row]) -> None:
        """Start drafting for ``rows`` (already admitted to the loop)."""
        for row in rows:
            self.states[row.key] = self.drafter.start(row.prompt_ids, self.env)
            self.lengths[row.key] = DraftLength(self.drafter.max_tokens)

    def run(self) -> None:
        """Step until every row of the loop has finished."""
        while self.loop.rows:
            self.step()

    def step(self) -> list[Row]:
        """One verification pass for every open row; returns the rows that finished (now retired)."""
        loop = self.loop
        finished = self._retire()
        if not loop.rows:
            return finished
        active = list(range(len(loop.rows)))
        handed = loop.next_logits is not None  # AdaDec's rollout gave this step's logits: no pass, no draft
        drafts = {i: [] if handed else self._draft(i, len(loop.feeds[i])) for i in active}
        layout = StepLayout.verification({i: tuple(d) for i, d in drafts.items()})
        loop.pipeline.prepare(layout)
        rows, passes = self._verify(loop.feeds, drafts)
        for stage in loop.pipeline.stages:
            stage.apply(rows, layout)
        chosen = self.selector.select(rows, layout).tolist()  # every row's pick in one host sync
        paused = set() if self.uncertainty is None else set(self.uncertainty.paused_rows(rows).tolist())
        first = 0
        for i in active:
            loop.rows[i].stats.forward_passes += passes
            loop.feeds[i] = self._confirm(i, drafts[i], first, chosen, _Pauses(rows, paused))
            first += len(drafts[i]) + 1
        self._crop_rejected()
        return finished + self._retire()

    def _retire(self) -> list[Row]:
        finished = self.loop.retire_finished()
        for row in finished:
            self.states.pop(row.key, None)
            self.lengths.pop(row.key, None)
        return finished

    # -- drafting ----------------------------------------------------------------------------

    def _draft(self, index: int, fed: int) -> list[int]:
        """This step's draft for row ``index``, whose pass also feeds ``fed`` uncached tokens: at most
        its adaptive length, and never past the token budget (the last token of a step is always
        the model's own)."""
        row = self.loop.rows[index]
        length = self.lengths[row.key].choose(lambda k: self.cost.estimate(fed + k))
        limit = min(length, row.options.max_new_tokens - len(row.token_ids) - 1)
        if limit < 1:
            return []
        proposal = self.states[row.key].propose([], row.matcher, limit)
        return self._as_plain_decoding_writes(proposal, row.matcher, row.options.jump_forward)[:limit]

    def _as_plain_decoding_writes(self, draft: Sequence[int], matcher: GrammarMatcher | None,
                                  jump_forward: bool) -> list[int]:
        """``draft`` cut at the first refused or stop token, with each token followed by the forced
        tokens plain decoding would append after it (realigned with the draft's own bytes, or cut)."""
        probe = matcher.fork() if matcher is not None else None
        out: list[int] = []
        j = 0
        while j < len(draft):
            token = int(draft[j])
            if token in self.stop_ids or (probe is not None and probe.is_terminated()):
                break
            if probe is None:
                out.append(token)
                j += 1
                continue
            tokens = self.loop.jump_forward(probe, token, _JUMP_BUDGET) if jump_forward else [token]
            if not all(probe.accept_token(t) for t in tokens):
                break
            out += tokens
            aligned = self._realign(draft, j, self.loop.bytes_of(tokens))
            if aligned is None:
                break
            j = aligned
        return out

    def _realign(self, draft: Sequence[int], start: int, text: bytes) -> int | None:
        """The index after the draft tokens from ``start`` that spell exactly ``text`` (None: no boundary)."""
        spelled = 0
        j = start
        token_bytes = self.loop.vocab.token_bytes
        while spelled < len(text) and j < len(draft):
            piece = token_bytes[int(draft[j])]
            if text[spelled: spelled + len(piece)] != piece:
                return None
            spelled += len(piece)
            j += 1
        return j if spelled == len(text) else None

    # -- verification ------------------------------------------------------------------------

    def _verify(self, feeds: list[list[int]], drafts: dict[int, list[int]]) -> tuple[torch.Tensor, int]:
        """The K+1 logits rows of every active row's draft (in ``active`` order) and the number of
        forward passes that took: one pass over each row's uncached tokens and its draft, or none
        where AdaDec handed over a cache that holds every committed token with the next position's
        logits (``loop.next_logits``; one sequence, drafted nothing: that position usually pauses)."""
        loop = self.loop
        handed, loop.next_logits = loop.next_logits, None
        if handed is not None:
            return handed, 0
        width = max(len(d) for d in drafts.values()) + 1
        chunk = [feeds[i] + drafts[i] for i in range(len(loop.rows))]
        timed = time.perf_counter()
        logits = loop.forward(chunk, keep=width)
        if loop.cache.get_seq_length() > max(len(c) for c in chunk):  # not the prefill: time it for the draft length
            self.cost.record(max(len(c) for c in chunk), time.perf_counter() - timed)
        return torch.cat([logits[i, width - len(drafts[i]) - 1:] for i in range(len(loop.rows))]), 1

    def _confirm(self, index: int, draft: list[int], first: int, chosen: list[int], pauses: _Pauses) -> list[int]:
        """Commit what the verification pass confirms for row ``index``; returns its next feed.

        ``first`` is the row's first logits row (its state before the draft); ``chosen`` the token
        plain decoding picks at each logits row. At each position the picked token goes through
        the loop's ``advance`` (which may append a forced continuation);
        the walk continues while the committed tokens are the draft's next tokens, and ends after
        an AdaDec pause (`_pause`).
        """
        loop = self.loop
        row = loop.rows[index]
        before = len(row.token_ids)
        j = 0
        handed: list[int] | None = None
        while True:
            if first + j in pauses.rows:
                tokens = loop.advance(index, self._pause(index, len(draft) - j, pauses.logits[first + j:first + j + 1]))
                handed = loop.take_over(index, tokens)
                break
            tokens = loop.advance(index, chosen[first + j])
            if row.finish_reason is not None or draft[j: j + len(tokens)] != tokens:
                break
            j += len(tokens)
        appended = row.token_ids[before:]
        self.states[row.key].commit(appended)
        # At least the last committed token is fed again (its logits are the next step's): after a
        # pause, the candidate and its continuation may all be drafted tokens already in the cache.
        accepted = _common_prefix(appended, draft)
        if row.finish_reason is None:
            accepted = min(accepted, len(appended) - 1)
        row.stats.speculative.drafted_tokens += len(draft)
        row.stats.speculative.accepted_tokens += accepted
        self.lengths[row.key].update(len(draft), accepted)
        if handed is not None:  # the rollout's cache: its mask already hides the drafts the pause cut off
            return handed
        if draft:  # the cache positions of the rejected drafts become holes; the confirmed ones stay
            assert loop.attention is not None
            columns = loop.attention[index, loop.attention.shape[1] - len(draft):]
            columns[:accepted] = 1
            columns[accepted:] = 0
        return appended[accepted:] if row.finish_reason is None else [loop.pad_id]

    def _pause(self, index: int, unverified: int, logits: torch.Tensor) -> int:
        """AdaDec's pick at row ``index``'s current position: its last ``unverified`` drafts are masked
        out of the KV cache first, so that the rollouts fork exactly the committed sequence."""
        assert self.uncertainty is not None
        attention = self.loop.attention
        if unverified and attention is not None:
            attention[index, attention.shape[1] - unverified:] = 0
        return self.uncertainty.pause(logits, index)

    def _crop_rejected(self) -> None:
        """Drop trailing cache columns that no row attends to (rejected drafts of every row)."""
        attention = self.loop.attention
        assert attention is not None
        live = torch.nonzero(attention.any(dim=0)).flatten()
        keep = int(live[-1]) + 1 if len(live) else 0
        extra = attention.shape[1] - keep
        if extra > 0:
            self.loop.cache.crop(-extra)
            self.loop.attention = attention[:, :keep]


@dataclass(frozen=True)
class _Pauses:
    """The verification pass's processed logits rows and those whose entropy reached AdaDec's τ."""

    logits: torch.Tensor
    rows: set[int]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
