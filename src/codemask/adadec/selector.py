"""AdaDec as a :class:`~codemask.decoding.pipeline.Selector`: pause where the entropy reaches τ, look ahead, rerank.

Per step, on the already processed logits (grammar and monitor masks, RPG's decay): the entropy of
every row is computed on the device and compared with τ — the one host synchronisation of a step
that does not pause. Rows below τ keep the base selector's choice (greedy, or sampling). A row at
or above τ takes its top ``beam`` candidates; each is rolled out ``lookahead`` tokens greedily and
scored by the mean log-probability of candidate + rollout; the best candidate is chosen.

The rollouts of all paused rows run together: the decoding loop's KV cache is forked (each paused
row's cache rows selected ``beam`` times; the loop's own cache is not touched) and every lookahead
step is one forward pass over all live candidates. Inside a rollout, the pipeline's stages process
each candidate's logits for the state it stands for — the sequence after the candidate and the
rollout so far, handed to the stage as drafted tokens (``StepLayout.drafts``), exactly as for
speculative verification — so that grammar masks, monitors and RPG constrain the lookahead too and
every candidate stays valid. A rollout ends early at a stop token and, with ``lookahead="line"``, at
the end of the line.

With greedy decoding the chosen candidate's rollout is what plain AdaDec decodes next, as long as
the entropy stays below τ (no pause) and no stop token comes: those tokens are offered to the loop
(`known_continuation`), which commits them with the candidate. A loop that decodes one sequence
also takes over the rollout's KV cache for them (`continuation_cache`), so it feeds only the last
committed token; a batch feeds them in one forward pass. Either way most of what a pause costs comes
back.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from codemask.adadec.config import AdaDec
from codemask.adadec.entropy import entropy
from codemask.decoding.pipeline import Selector, Stage, StepLayout
from codemask.decoding.sampling import SamplingSelector

# On a CPU, MKL's sgemm runs a product with 2 or 3 rows as that many matrix-vector products and blocks
# from 4 rows on: one Qwen2.5-0.5B decoding step costs 1.0 / 2.0 / 2.7 / 1.8 single-row steps for
# 1 / 2 / 3 / 4 rows (fp32, one thread, AVX-512, MKL 2024.2, torch 2.13; `benchmarks/cpu_batch_cost.py`).
# A branch of 2 or 3 rows is therefore padded with copies of its first row to this many.
CPU_MIN_BLOCKED_ROWS = 4


class KVBranch:
    """A fork of the decoding loop's KV cache for some of its rows, extended one token per row at a time.

    ``rows[i]`` is the batch row of the loop's cache that branch row ``i`` continues. The loop's cache
    tensors are only read: selecting rows makes new tensors and every ``step`` concatenates. On a CPU a
    branch of 2–3 rows carries padding rows (copies of its first row, see ``CPU_MIN_BLOCKED_ROWS``):
    a 4-row step is a third cheaper there than a 3-row one.
    """

    def __init__(self, model: Any, cache: Any, attention: torch.Tensor, rows: Sequence[int]) -> None:
        self.model = model
        self.cache = copy.copy(cache)
        self.cache.layers = [copy.copy(layer) for layer in cache.layers]
        self.rows = len(rows)
        index = self._padded(rows, attention.device)
        self.cache.batch_select_indices(index)
        self.attention = attention.index_select(0, index)

    def _padded(self, indices: Sequence[int], device: torch.device) -> torch.Tensor:
        """``indices`` and, on a CPU when they are 2 or 3, copies of the first up to the blocked width."""
        padded = list(indices)
        if device.type == "cpu" and 1 < len(padded) < CPU_MIN_BLOCKED_ROWS:
            padded += [padded[0]] * (CPU_MIN_BLOCKED_ROWS - len(padded))
        return torch.tensor(padded, dtype=torch.long, device=device)

    def keep(self, indices: Sequence[int]) -> None:
        """Drop every branch row but ``indices`` (in that order)."""
        self.rows = len(indices)
        index = self._padded(indices, self.attention.device)
        self.cache.batch_select_indices(index)
        self.attention = self.attention.index_select(0, index)

    def prefix(self, row: int, length: int) -> tuple[Any, torch.Tensor]:
        """Branch row ``row`` alone, cut to its first ``length`` positions: a cache and attention mask
        the decoding loop can continue from (this branch is spent afterwards)."""
        self.keep([row])
        extra = self.cache.get_seq_length() - length
        if extra > 0:
            self.cache.crop(-extra)
        return self.cache, self.attention[:, :length]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per branch row (a long tensor); the next-token logits ``[rows, vocab]`` (float32)."""
        width = self.attention.shape[0]
        tokens = tokens.view(-1).to(self.attention.device)
        if width > self.rows:
            tokens = torch.cat([tokens, tokens[:1].expand(width - self.rows)])
        ones = torch.ones((width, 1), dtype=self.attention.dtype, device=self.attention.device)
        self.attention = torch.cat([self.attention, ones], dim=1)
        positions = (self.attention.cumsum(-1) - 1)[:, -1:]
        with torch.inference_mode():
            out = self.model(input_ids=tokens.view(-1, 1), attention_mask=self.attention,
                             position_ids=positions, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.cache = out.past_key_values
        return out.logits[: self.rows, -1, :].float()


@dataclass
class _Handoff:
    """Where the chosen rollout of a sequence sits in the rollouts' KV branch: its row, the length
    of the loop's cache the branch forked from, and the tokens the branch has fed for it."""

    branch: KVBranch
    row: int
    base_length: int
    fed: list[int]


@dataclass
class _Rollout:
    """One candidate of one paused row: its tokens so far, the sum of their log-probabilities, and
    the entropy of the (processed) distribution each rollout token was picked from."""

    logits_row: int
    sequence: int
    tokens: list[int]
    score: float
    alive: bool = True
    entropies: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return self.score / len(self.tokens)


class AdaDecSelector(Selector):
    """Pause-and-rerank around a base selector. ``attach(loop)`` gives it the loop's model and KV cache.

    Per sequence it counts ``pauses`` (steps whose entropy reached τ), ``lookahead_tokens`` (tokens
    fed to the model by its rollouts) and ``lookahead_time_s`` (wall time of its reranks; a rerank
    shared by several rows is split evenly among them).
    """

    def __init__(self, config: AdaDec, threshold: float, base: Selector, stages: Sequence[Stage],
                 token_bytes: Sequence[bytes], stop_token_ids: Sequence[int], num_sequences: int) -> None:
        self.config = config
        self.threshold = float(threshold)
        self.base = base
        self.stages = list(stages)
        self.token_bytes = token_bytes
        self.stop_token_ids = frozenset(int(t) for t in stop_token_ids)
        self.pauses = [0] * num_sequences
        self.lookahead_tokens = [0] * num_sequences
        self.lookahead_time_s = [0.0] * num_sequences
        self._loop: Any = None
        self.reuse = config.reuse_lookahead and isinstance(base, SamplingSelector) and base.params.greedy
        self._continuations: dict[int, list[int]] = {}
        self._handoffs: dict[int, _Handoff] = {}

    @classmethod
    def for_generation(cls, config: AdaDec, model: Any, base: Selector, stages: Sequence[Stage], vocab: Any,
                       num_sequences: int) -> AdaDecSelector:
        """The selector for one ``constrained_generate`` call (τ resolved for ``model``)."""
        return cls(config, config.threshold_for(model), base, stages, vocab.token_bytes,
                   sorted(vocab.stop_token_ids), num_sequences)

    def attach(self, loop: Any) -> None:
        """Roll out from ``loop``'s KV cache: it has ``model``, ``cache`` and ``attention`` (its attention mask)."""
        self._loop = loop

    def record(self, stats: Sequence[Any]) -> None:
        """Copy the per-sequence counters into each row's ``GenerationStats``."""
        for i, s in enumerate(stats):
            s.pauses, s.lookahead_tokens, s.lookahead_time_s = (self.pauses[i], self.lookahead_tokens[i],
                                                               self.lookahead_time_s[i])

    # -- the step ----------------------------------------------------------------------------

    def select(self, logits: torch.Tensor, layout: StepLayout) -> torch.Tensor:
        self._handoffs.clear()
        chosen = self.base.select(logits, layout)
        paused = [r for r in self.paused_rows(logits).tolist() if layout.offsets[r] == 0]  # the host sync
        if not paused:
            return chosen
        best = self._paused_rerank(logits, layout, paused)
        chosen = chosen.clone()
        chosen[torch.tensor(list(best), device=chosen.device)] = torch.tensor(list(best.values()),
                                                                              dtype=chosen.dtype, device=chosen.device)
        return chosen

    def pause(self, logits: torch.Tensor, sequence: int) -> int:
        """Rerank at one paused position: ``logits`` (``[1, vocab]``, processed) is ``sequence``'s next-token
        distribution at the state the loop's KV cache holds for it (speculative verification calls this at
        the first drafted position whose entropy reaches τ, with the drafts after it masked out)."""
        self._handoffs.clear()
        return self._paused_rerank(logits, StepLayout.one_row_per_sequence([sequence]), [0])[0]

    def _paused_rerank(self, logits: torch.Tensor, layout: StepLayout, paused: list[int]) -> dict[int, int]:
        """`_rerank` with the pause counters and the time it took (split evenly among the paused rows)."""
        started = time.perf_counter()
        for r in paused:
            self.pauses[layout.sequences[r]] += 1
        best = self._rerank(logits, layout, paused)
        spent = (time.perf_counter() - started) / len(paused)
        for r in paused:
            self.lookahead_time_s[layout.sequences[r]] += spent
        return best

    def paused_rows(self, logits: torch.Tensor) -> torch.Tensor:
        """Indices of the rows whose entropy (nats) is at least τ (on the logits' device)."""
        if math.isinf(self.threshold):
            return torch.zeros(0, dtype=torch.long, device=logits.device)
        return torch.nonzero(entropy(logits) >= self.threshold).flatten()

    def _rerank(self, logits: torch.Tensor, layout: StepLayout, paused: list[int]) -> dict[int, int]:
        """For each paused logits row, the candidate with the best mean log-probability after its rollout."""
        log_probs = torch.log_softmax(logits[paused].float(), dim=-1)
        k = min(self.config.beam, log_probs.shape[-1])
        top = torch.topk(log_probs, k, dim=-1)
        values, ids = top.values.tolist(), top.indices.tolist()
        best: dict[int, int] = {}
        rollouts: list[_Rollout] = []
        for r, vals, cands in zip(paused, values, ids, strict=True):
            options = [(t, v) for t, v in zip(cands, vals, strict=True) if math.isfinite(v)]
            best[r] = options[0][0]
            if len(options) < 2:
                continue  # nothing to compare: the grammar leaves one token
            for token, value in options:
                rollouts.append(_Rollout(r, layout.sequences[r], [token], value,
                                         alive=self._continues(token, candidate=True)))
        branch: tuple[KVBranch, list[_Rollout], int] | None = None
        if rollouts and self.config.lookahead_tokens > 0 and any(o.alive for o in rollouts):
            branch = self._roll_out(rollouts)
        by_row: dict[int, _Rollout] = {}
        for o in rollouts:  # the first (highest-ranked) candidate wins ties
            if o.logits_row not in by_row or o.mean > by_row[o.logits_row].mean:
                by_row[o.logits_row] = o
        for r, o in by_row.items():
            best[r] = o.tokens[0]
            if self.reuse:
                self._continuations[o.sequence] = self._greedy_prefix(o)
                if branch is not None and o.alive and o in branch[1]:
                    self._handoffs[o.sequence] = _Handoff(branch[0], branch[1].index(o), branch[2], o.tokens[:-1])
        return best

    def known_continuation(self, sequence: int) -> list[int]:
        return self._continuations.pop(sequence, [])

    def continuation_cache(self, sequence: int, committed: Sequence[int]) -> tuple[Any, torch.Tensor] | None:
        """The rollout branch's cache for the chosen candidate, cut after ``committed[:-1]``: the
        rollout fed those very tokens already, so the loop need not feed them again."""
        handoff = self._handoffs.pop(sequence, None)
        if handoff is None or len(committed) - 1 > len(handoff.fed) or \
                list(committed[:-1]) != handoff.fed[:len(committed) - 1]:
            return None
        return handoff.branch.prefix(handoff.row, handoff.base_length + len(committed) - 1)

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

    def _roll_out(self, rollouts: list[_Rollout]) -> tuple[KVBranch, list[_Rollout], int]:
        """Extend every live rollout greedily, one batched forward pass per lookahead step. Returns
        the branch, the rollouts still in it (in its row order) and the cache length it forked at."""
        if self._loop is None or self._loop.cache is None or self._loop.attention is None:
            raise RuntimeError("AdaDecSelector needs attach(loop) before it can look ahead")
        live = [o for o in rollouts if o.alive]
        branch = KVBranch(self._loop.model, self._loop.cache, self._loop.attention, [o.sequence for o in live])
        base_length = int(self._loop.attention.shape[1])
        device = self._loop.attention.device
        for _ in range(self.config.lookahead_tokens):
            feed = torch.tensor([o.tokens[-1] for o in live], dtype=torch.long, device=device)
            step_logits = branch.step(feed)
            for o in live:
                self.lookahead_tokens[o.sequence] += 1
            for j, o in enumerate(live):  # each candidate's own state: its tokens so far as drafts
                layout = StepLayout((o.sequence,), (len(o.tokens),), {o.sequence: tuple(o.tokens)})
                row = step_logits[j:j + 1]
                for stage in self.stages:
                    stage.apply(row, layout)
                if row.device.type == "cuda":  # stages reuse one pinned host buffer per call
                    torch.cuda.current_stream(row.device).synchronize()
            log_probs = torch.log_softmax(step_logits, dim=-1)
            picked = log_probs.argmax(dim=-1)
            scores = log_probs.gather(-1, picked.unsqueeze(-1)).squeeze(-1)
            spreads = entropy(step_logits).tolist()
            keep: list[int] = []
            for j, (o, token, score) in enumerate(zip(live, picked.tolist(), scores.tolist(), strict=True)):
                if not math.isfinite(score):  # every token masked: a state the stages cannot continue
                    o.alive = False
                    continue
                o.tokens.append(int(token))
                o.entropies.append(spreads[j])
                o.score += score
                o.alive = self._continues(int(token), candidate=False)
                if o.alive:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(live):
                branch.keep(keep)
                live = [live[j] for j in keep]
        return branch, live, base_length
