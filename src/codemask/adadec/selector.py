"""AdaDec as a :class:`~codemask.decoding.pipeline.Selector`: pause where the entropy reaches τ, look ahead, rerank.

Per step, on the already processed logits (grammar and monitor masks, RPG's decay): the entropy of
every row is computed on the device and compared with τ — the one host synchronisation of a step
that does not pause. Rows below τ keep the base selector's choice (greedy, or sampling). A row at
or above τ takes its top ``beam`` candidates; each is rolled out ``lookahead`` tokens greedily and
scored by the mean log-probability of candidate + rollout; the best candidate is chosen.

Rollouts run in two rounds, each one forward pass per lookahead token over a fork of the decoding
loop's KV cache (rows selected per rollout; the loop's own cache is not touched): first the leaders
(every paused row's top candidate), then the challengers (the others) — only those that can still
win. A mean log-probability only falls as a rollout goes on and has at most ``lookahead + 1`` terms,
so a challenger whose score so far divided by that is no better than its leader's mean is pruned,
before or during its rollout: the choice is exactly that of rolling out every candidate. Inside a
rollout, the pipeline's stages process each candidate's logits for the state it stands for — the
sequence after the candidate and the rollout so far, handed to the stage as drafted tokens
(``StepLayout.drafts``), exactly as for speculative verification — so that grammar masks, monitors
and RPG constrain the lookahead too and every candidate stays valid. A rollout ends early at a stop
token and, with ``lookahead="line"``, at the end of the line.

With greedy decoding the chosen candidate's rollout is what plain AdaDec decodes next, as long as
the entropy stays below τ (no pause) and no stop token comes: those tokens are offered to the loop
(`known_continuation`), which commits them with the candidate; a batch feeds them in one forward
pass. A loop that decodes one sequence also takes over the rollout's KV cache (`continuation_cache`):
it feeds only the last committed token or, where the rollout fed them all (it went on past the
point where its entropy reached τ), nothing — the rollout's logits for the next position come with
the cache. That next position usually pauses again with the rollout's own next token first: the
rest of the rollout is then that leader's lookahead already (a chain), and it only goes on from there.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from codemask.adadec.config import AdaDec
from codemask.adadec.entropy import entropy
from codemask.adadec.row_padding import padded_rows
from codemask.decoding import kv
from codemask.decoding.pipeline import Continuation, Selector, Stage, StepLayout, reindexed, without
from codemask.decoding.row import Row
from codemask.decoding.sampling import SamplingSelector
from codemask.decoding.stats import GenerationStats

if TYPE_CHECKING:
    from codemask.decoding.loop import DecodingLoop


class KVBranch:
    """A fork of the decoding loop's KV cache for some of its rows, extended one token per row at a time.

    ``rows[i]`` is the batch row of the loop's cache that branch row ``i`` continues. The loop's cache
    tensors are only read: selecting rows makes new tensors and every ``step`` concatenates. On a CPU
    where a 4-row product is measured faster than a 2- or 3-row one, such a branch carries padding
    rows (copies of its first row, see :mod:`codemask.adadec.row_padding`).
    """

    def __init__(self, model: Any, cache: Any, attention: torch.Tensor, rows: Sequence[int]) -> None:
        self.model = model
        self.cache = copy.copy(cache)
        self.cache.layers = [copy.copy(layer) for layer in cache.layers]
        self.attention = attention
        self._select(rows)

    def _select(self, indices: Sequence[int]) -> None:
        """Keep rows ``indices`` of the cache and mask (in that order) and, where padding is measured
        to pay (`padded_rows`), copies of the first up to the blocked width. Keeping every row as it is copies nothing
        (a single sequence's fork shares the loop's tensors until its first step concatenates)."""
        self.rows = len(indices)
        padded = list(indices)
        padded += [padded[0]] * (padded_rows(self.model, len(padded), self.attention.device) - len(padded))
        if padded == list(range(self.attention.shape[0])):
            return
        index = torch.tensor(padded, dtype=torch.long, device=self.attention.device)
        self.cache.batch_select_indices(index)
        self.attention = self.attention.index_select(0, index)

    def keep(self, indices: Sequence[int]) -> None:
        """Drop every branch row but ``indices`` (in that order)."""
        self._select(indices)

    def prefix(self, row: int, length: int) -> tuple[Any, torch.Tensor]:
        """Branch row ``row`` alone, cut to its first ``length`` positions: a cache and attention mask
        the decoding loop can continue from. The branch itself is left as it was (it may go on)."""
        cache = copy.copy(self.cache)
        cache.layers = [copy.copy(layer) for layer in self.cache.layers]
        index = torch.tensor([row], dtype=torch.long, device=self.attention.device)
        if self.attention.shape[0] > 1:
            cache.batch_select_indices(index)
        extra = cache.get_seq_length() - length
        if extra > 0:
            cache.crop(-extra)
        return cache, self.attention.index_select(0, index)[:, :length]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per branch row (a long tensor); the next-token logits ``[rows, vocab]`` (float32)."""
        width = self.attention.shape[0]
        tokens = tokens.view(-1).to(self.attention.device)
        if width > self.rows:
            tokens = torch.cat([tokens, tokens[:1].expand(width - self.rows)])
        ones = torch.ones((width, 1), dtype=self.attention.dtype, device=self.attention.device)
        self.attention = torch.cat([self.attention, ones], dim=1)
        positions = (self.attention.cumsum(-1) - 1)[:, -1:]
        logits, self.cache = kv.run_model(self.model, self.cache, input_ids=tokens.view(-1, 1),
                                          attention_mask=self.attention, position_ids=positions, logits_to_keep=1)
        return logits[: self.rows, -1, :].to(torch.float32, copy=True)  # stages edit it outside inference mode


@dataclass
class _Seat:
    """Where a rollout sits in a KV branch: its row there, and the cache length at its candidate's
    position (the branch holds the rollout's tokens but the last from there on)."""

    branch: KVBranch
    row: int
    base_length: int


@dataclass
class _Rollout:
    """One candidate of one paused row: its tokens so far (the candidate first) and the log-probability
    each was picked with; per rollout token, the entropy of the (processed) distribution it was picked
    from; and, for a loop that may take the rollout over, the raw logits after each fed token.

    A rollout ends (``alive`` false) after a stop token or, with ``lookahead="line"``, a newline — its
    branch holds all its tokens but that last one, as for a live rollout — or ``stuck`` where the
    stages masked every token after its last one (its branch fed that one too). ``pruned``: it can
    no longer beat its leader (see `AdaDecSelector._rerank`)."""

    logits_row: int
    sequence: int
    tokens: list[int]
    log_probs: list[float]
    alive: bool = True
    pruned: bool = False
    stuck: bool = False
    entropies: list[float] = field(default_factory=list)
    raw_logits: list[torch.Tensor] = field(default_factory=list)
    seat: _Seat | None = None

    @property
    def score(self) -> float:
        return sum(self.log_probs)

    @property
    def mean(self) -> float:
        return self.score / len(self.tokens)


@dataclass
class _Chain:
    """The chosen rollout of a sequence after the loop took over its cache with the first ``offset``
    tokens committed: if AdaDec pauses right there and ranks the rollout's next token first, the
    rollout's remaining tokens are that candidate's lookahead already."""

    rollout: _Rollout
    offset: int


class AdaDecSelector(Selector):
    """Pause-and-rerank around a base selector. ``attach(loop)`` gives it the loop's model and KV cache.

    Per sequence it counts ``pauses`` (steps whose entropy reached τ), ``lookahead_tokens`` (tokens
    fed to the model by its rollouts) and ``lookahead_time_s`` (wall time of its reranks; a rerank
    shared by several rows is split evenly among them).
    """

    def __init__(self, config: AdaDec, threshold: float, base: Selector, stages: Sequence[Stage],
                 token_bytes: Sequence[bytes], stop_token_ids: Sequence[int], num_sequences: int = 0) -> None:
        self.config = config
        self.threshold = float(threshold)
        self.base = base
        self.stages = list(stages)
        self.token_bytes = token_bytes
        self.stop_token_ids = frozenset(int(t) for t in stop_token_ids)
        self.pauses = [0] * num_sequences
        self.lookahead_tokens = [0] * num_sequences
        self.lookahead_time_s = [0.0] * num_sequences
        self._loop: DecodingLoop | None = None
        self.reuse = config.reuse_lookahead and isinstance(base, SamplingSelector) and base.params.greedy
        self._continuations: dict[int, list[int]] = {}
        self._handoffs: dict[int, _Rollout] = {}
        self._chains: dict[int, _Chain] = {}

    @classmethod
    def for_generation(cls, config: AdaDec, model: Any, base: Selector, stages: Sequence[Stage],
                       vocab: Any) -> AdaDecSelector:
        """The selector for one decoding loop (τ resolved for ``model``); rows come through ``admit``."""
        return cls(config, config.threshold_for(model), base, stages, vocab.token_bytes, sorted(vocab.stop_token_ids))

    def attach(self, loop: DecodingLoop) -> None:
        """Roll out from ``loop``'s KV cache (its ``model``, ``cache`` and ``attention`` mask)."""
        self._loop = loop

    def record(self, sequence: int, stats: GenerationStats) -> None:
        """Copy the sequence's counters into its stats' ``adadec`` section."""
        section = stats.adadec
        section.pauses, section.lookahead_tokens = self.pauses[sequence], self.lookahead_tokens[sequence]
        section.lookahead_time_s = self.lookahead_time_s[sequence]
        self.base.record(sequence, stats)

    def admit(self, rows: Sequence[Row]) -> None:
        self.pauses += [0] * len(rows)
        self.lookahead_tokens += [0] * len(rows)
        self.lookahead_time_s += [0.0] * len(rows)
        self.base.admit(rows)

    def retire(self, sequences: Sequence[int]) -> None:
        self.pauses = without(self.pauses, sequences)
        self.lookahead_tokens = without(self.lookahead_tokens, sequences)
        self.lookahead_time_s = without(self.lookahead_time_s, sequences)
        self._continuations = reindexed(self._continuations, sequences)
        self._handoffs = reindexed(self._handoffs, sequences)
        self._chains = reindexed(self._chains, sequences)
        self.base.retire(sequences)

    # -- the step ----------------------------------------------------------------------------

    def select(self, logits: torch.Tensor, layout: StepLayout) -> torch.Tensor:
        self._handoffs.clear()
        chains, self._chains = self._chains, {}  # a chain serves only the step right after its handoff
        chosen = self.base.select(logits, layout)
        paused = [r for r in self.paused_rows(logits).tolist() if layout.offsets[r] == 0]  # the host sync
        if not paused:
            return chosen
        best = self._paused_rerank(logits, layout, paused, chains)
        chosen = chosen.clone()
        chosen[torch.tensor(list(best), device=chosen.device)] = torch.tensor(list(best.values()),
                                                                              dtype=chosen.dtype, device=chosen.device)
        return chosen

    def pause(self, logits: torch.Tensor, sequence: int) -> int:
        """Rerank at one paused position: ``logits`` (``[1, vocab]``, processed) is ``sequence``'s next-token
        distribution at the state the loop's KV cache holds for it (speculative verification calls this at
        the first drafted position whose entropy reaches τ, with the drafts after it masked out)."""
        self._handoffs.clear()
        self._chains.clear()
        return self._paused_rerank(logits, StepLayout.one_row_per_sequence([sequence]), [0], {})[0]

    def _paused_rerank(self, logits: torch.Tensor, layout: StepLayout, paused: list[int],
                       chains: dict[int, _Chain]) -> dict[int, int]:
        """`_rerank` with the pause counters and the time it took (split evenly among the paused rows)."""
        started = time.perf_counter()
        for r in paused:
            self.pauses[layout.sequences[r]] += 1
        best = self._rerank(logits, layout, paused, chains)
        spent = (time.perf_counter() - started) / len(paused)
        for r in paused:
            self.lookahead_time_s[layout.sequences[r]] += spent
        return best

    def paused_rows(self, logits: torch.Tensor) -> torch.Tensor:
        """Indices of the rows whose entropy (nats) is at least τ (on the logits' device)."""
        if math.isinf(self.threshold):
            return torch.zeros(0, dtype=torch.long, device=logits.device)
        return torch.nonzero(entropy(logits) >= self.threshold).flatten()

    def _rerank(self, logits: torch.Tensor, layout: StepLayout, paused: list[int],
                chains: dict[int, _Chain]) -> dict[int, int]:
        """For each paused logits row, the candidate with the best mean log-probability after its rollout.

        The top candidate (the leader) is rolled out first. A rollout's mean can only fall as it goes
        on (every log-probability is at most 0) and has at most ``lookahead_tokens + 1`` terms, so a
        challenger whose score so far, divided by that, is no better than the leader's final mean
        cannot win: challengers are rolled out only while that bound stays above it. The choice is
        the one rolling out all ``beam`` candidates would make (the leader wins ties, as the first).
        """
        log_probs = torch.log_softmax(logits[paused].float(), dim=-1)
        k = min(self.config.beam, log_probs.shape[-1])
        top = torch.topk(log_probs, k, dim=-1)
        best: dict[int, int] = {}
        leaders: list[_Rollout] = []
        challengers: list[_Rollout] = []
        for r, vals, cands in zip(paused, top.values.tolist(), top.indices.tolist(), strict=True):
            options = [(t, v) for t, v in zip(cands, vals, strict=True) if math.isfinite(v)]
            best[r] = options[0][0]
            if len(options) < 2:
                continue  # nothing to compare: the grammar leaves one token
            sequence = layout.sequences[r]
            chain = chains.get(sequence) if len(paused) == 1 else None
            leaders.append(self._chained(chain, r, *options[0]) if chain is not None else
                           self._candidate(r, sequence, *options[0]))
            challengers += [self._candidate(r, sequence, t, v) for t, v in options[1:]]
        if not leaders or self.config.lookahead_tokens == 0:
            return best
        self._extend(leaders, {})
        bar = {o.logits_row: o.mean for o in leaders}
        for o in challengers:
            o.pruned = not self._may_win(o, bar)
        self._extend([o for o in challengers if not o.pruned], bar)
        chosen: dict[int, _Rollout] = {}
        for o in leaders + challengers:  # leaders first: a challenger must beat its leader strictly
            if not o.pruned and (o.logits_row not in chosen or o.mean > chosen[o.logits_row].mean):
                chosen[o.logits_row] = o
        for r, o in chosen.items():
            best[r] = o.tokens[0]
            if self.reuse:
                self._continuations[o.sequence] = self._greedy_prefix(o)
                if o.seat is not None:
                    self._handoffs[o.sequence] = o
        return best

    def _candidate(self, row: int, sequence: int, token: int, log_prob: float) -> _Rollout:
        return _Rollout(row, sequence, [token], [log_prob], alive=self._continues(token, candidate=True))

    def _chained(self, chain: _Chain, row: int, token: int, log_prob: float) -> _Rollout:
        """The leader from the chosen rollout of the step before, when the loop stands where that
        rollout's ``offset``-th token was picked and ranks the same token first; else a fresh one."""
        old, at = chain.rollout, chain.offset
        seat = old.seat
        attention = None if self._loop is None else self._loop.attention
        if (seat is None or attention is None or old.tokens[at] != token
                or attention.shape[1] != seat.base_length + at):
            return self._candidate(row, old.sequence, token, log_prob)
        seat.branch.keep([seat.row])
        alive = old.alive if at + 1 < len(old.tokens) else self._continues(token, candidate=True)
        return _Rollout(row, old.sequence, old.tokens[at:], [log_prob, *old.log_probs[at + 1:]], alive=alive,
                        entropies=old.entropies[at:], raw_logits=old.raw_logits[at:],
                        seat=_Seat(seat.branch, 0, seat.base_length + at))

    def _may_win(self, rollout: _Rollout, bar: dict[int, float]) -> bool:
        """Whether ``rollout`` can still end with a mean above its row's leader (see `_rerank`)."""
        return rollout.score / (self.config.lookahead_tokens + 1) > bar[rollout.logits_row]

    def known_continuation(self, sequence: int) -> list[int]:
        return self._continuations.pop(sequence, [])

    def continuation_cache(self, sequence: int, committed: Sequence[int]) -> Continuation | None:
        """The chosen rollout's cache, cut after ``committed``: the rollout fed those very tokens
        already. When it fed all of them, the logits it got after the last one come with it (and the
        rollout is kept as a chain for the pause that usually follows); else the cache holds all
        but the last and the loop feeds that one."""
        rollout = self._handoffs.pop(sequence, None)
        if rollout is None or rollout.seat is None:
            return None
        seat, fed, count = rollout.seat, rollout.tokens[:-1], len(committed)
        if count <= len(fed) and list(committed) == fed[:count]:
            cache, attention = seat.branch.prefix(seat.row, seat.base_length + count)
            self._chains[sequence] = _Chain(rollout, count)
            return Continuation(cache, attention, rollout.raw_logits[count - 1])
        if 2 <= count <= len(fed) + 1 and list(committed[:-1]) == fed[:count - 1]:
            return Continuation(*seat.branch.prefix(seat.row, seat.base_length + count - 1))
        return None

    def _greedy_prefix(self, rollout: _Rollout) -> list[int]:
        """The rollout tokens after the candidate that plain AdaDec picks next itself: greedy picks
        from distributions whose entropy stayed below τ, up to the first stop token."""
        out: list[int] = []
        for token, spread in zip(rollout.tokens[1:], rollout.entropies, strict=True):
            if spread >= self.threshold or token in self.stop_token_ids:
                break
            out.append(token)
        return out

    def _continues(self, token: int, candidate: bool) -> bool:
        """Whether a rollout that just took ``token`` goes on: not after a stop token and, with
        ``lookahead="line"``, not after a rollout token that holds a newline (the candidate's own
        newline starts the line that is looked at)."""
        if token in self.stop_token_ids:
            return False
        return candidate or self.config.lookahead != "line" or b"\n" not in self.token_bytes[token]

    def _extend(self, rollouts: list[_Rollout], bar: dict[int, float]) -> None:
        """Extend the live ``rollouts`` greedily to ``lookahead_tokens`` after their candidates, one
        batched forward pass per token, in one KV branch (a chained leader's own, else a fork of the
        loop's cache). Rollouts of one call have equal lengths, so they advance together. With a
        ``bar`` (per row, the leader's mean) a rollout that can no longer beat it is pruned."""
        live = [o for o in rollouts if o.alive]
        if not live:
            return
        if self._loop is None or self._loop.cache is None or self._loop.attention is None:
            raise RuntimeError("AdaDecSelector needs attach(loop) before it can look ahead")
        seat = live[0].seat
        if seat is not None:  # a chained leader, alone
            branch, base_length = seat.branch, seat.base_length
        else:
            branch = KVBranch(self._loop.model, self._loop.cache, self._loop.attention, [o.sequence for o in live])
            base_length = int(self._loop.attention.shape[1])
        device = self._loop.attention.device
        for _ in range(self.config.lookahead_tokens + 1 - len(live[0].tokens)):
            feed = torch.tensor([o.tokens[-1] for o in live], dtype=torch.long, device=device)
            step_logits = branch.step(feed)
            raw = step_logits.clone() if self.reuse else None
            for j, o in enumerate(live):  # each candidate's own state: its tokens so far as drafts
                self.lookahead_tokens[o.sequence] += 1
                if raw is not None:
                    o.raw_logits.append(raw[j:j + 1])
                layout = StepLayout((o.sequence,), (len(o.tokens),), {o.sequence: tuple(o.tokens)})
                row = step_logits[j:j + 1]
                for stage in self.stages:
                    stage.apply(row, layout)
                if row.device.type == "cuda":  # stages reuse one pinned host buffer per call
                    torch.cuda.current_stream(row.device).synchronize()
            self._pick(live, step_logits, bar)
            keep = [j for j, o in enumerate(live) if o.alive and not o.pruned]
            if not keep:
                break
            if len(keep) < len(live):
                branch.keep(keep)
                live = [live[j] for j in keep]
        for j, o in enumerate(live):
            o.seat = None if o.stuck else _Seat(branch, j, base_length)

    def _pick(self, live: list[_Rollout], step_logits: torch.Tensor, bar: dict[int, float]) -> None:
        """Append each live rollout's greedy pick from its processed logits; end or prune it."""
        log_probs = torch.log_softmax(step_logits, dim=-1)
        picked = log_probs.argmax(dim=-1)
        scores = log_probs.gather(-1, picked.unsqueeze(-1)).squeeze(-1)
        spreads = entropy(step_logits).tolist()
        for j, (o, token, score) in enumerate(zip(live, picked.tolist(), scores.tolist(), strict=True)):
            if not math.isfinite(score):  # every token masked: a state the stages cannot continue
                o.alive, o.stuck = False, True
                continue
            o.tokens.append(int(token))
            o.entropies.append(spreads[j])
            o.log_probs.append(score)
            o.alive = self._continues(int(token), candidate=False)
            o.pruned = bool(bar) and not self._may_win(o, bar)
