"""Choosing the next token from (masked) logits: greedy, or sampling with temperature, top-k, top-p.

All of it runs on the logits' device over whole rows at once. Tokens a grammar forbids hold
``-inf`` and so get probability zero under every setting here; top-k and top-p are applied after
masking, so they choose among allowed tokens only (the order XGrammar and vLLM use).

Sampling is an exponential race with noise keyed by position: the token a sequence samples at its
``t``-th output position is ``argmax_i p_i / E_i``, where ``E`` is a vector of Exp(1) draws made
from the seed, the sequence's index and ``t`` alone (:class:`PositionNoise`). The race picks ``i``
with probability ``p_i`` (the minimum of independent exponentials with rates ``p_i`` is the
``i``-th with probability ``p_i``). Why keyed rather than drawn in turn from one generator:

- **Speculative sampling is plain sampling, token for token.** A verification pass scores a
  draft of adaptive length (chosen from measured pass times, so it varies from run to run); draws
  taken in turn would be consumed differently on every run, and a seed reproduced nothing. With
  keyed noise, a drafted token is confirmed exactly when it wins its position's race — with
  probability ``p(x)``, as in speculative sampling against a one-hot draft — and every token
  written is the one plain sampling writes with the same seed.
- **A mask completed late changes nothing.** The race restricted to the allowed tokens is won by
  the winner of the whole race whenever that one is allowed, so a stage that defers part of its
  mask (:meth:`~codemask.decoding.pipeline.Stage.recheck`) and has the pipeline choose again
  with the same noise picks the token the full mask up front would have given (for the same
  logits: a later stage that reads the mask, as RPG's transfer to the stop token does, sees the
  deferred part only after the choice, greedy or sampled alike).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from codemask.decoding.pipeline import Selector, StepLayout, without
from codemask.decoding.row import Row

_MASK64 = (1 << 64) - 1
_NUCLEUS_CANDIDATES = 1024  # top-p looks for its nucleus among these first
_FIRST_BIN = 2.0**-25  # inside the first bin of -log(1 - U), [0, 2**-24), for U == 0


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is picked. ``temperature == 0`` is greedy (argmax, first index on ties)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def sampling_probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution sampling draws from (temperature, then top-k, then top-p), per row."""
    if params.greedy:
        raise ValueError("greedy decoding has no sampling distribution (temperature is 0)")
    scaled = logits.float() / params.temperature
    if params.top_k:
        scaled = _keep_top_k(scaled, params.top_k)
    if params.top_p < 1.0:
        scaled = _keep_top_p(scaled, params.top_p)
    return torch.softmax(scaled, dim=-1)


def _keep_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def _keep_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probability reaches ``p`` (at least one).

    The nucleus nearly always lies among the most likely thousand tokens, which a partial top-k
    finds far faster than a sort of the whole row (on a CPU, 0.7 ms against 12 ms for 152k logits);
    a row whose thousand hold less than ``p`` is sorted whole.
    """
    if logits.shape[-1] > _NUCLEUS_CANDIDATES:
        values, order = torch.topk(logits, _NUCLEUS_CANDIDATES, dim=-1)
        probs = torch.exp(values - torch.logsumexp(logits, dim=-1, keepdim=True))
        if bool((probs.sum(dim=-1) >= p).all()):
            before = torch.cumsum(probs, dim=-1) - probs
            kept = values.masked_fill(before >= p, float("-inf"))
            return torch.full_like(logits, float("-inf")).scatter_(-1, order, kept)
    ordered, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(ordered, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs  # probability mass strictly ahead of each token
    ordered = ordered.masked_fill(before >= p, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, ordered)


def exponential_race(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Per row, the token ``argmax_i probs_i / noise_i``: a draw from ``probs`` when ``noise`` is Exp(1).

    Tokens of probability zero never win (their ratio is 0, a token with any probability has a
    positive one while ``noise`` is positive and finite), and no ratio is NaN.
    """
    return (probs / noise).argmax(dim=-1)


class PositionNoise:
    """Exp(1) noise over the vocabulary for each (sequence, output position), made from a seed.

    Each row's noise comes from a generator on the logits' device seeded with a hash of
    ``(seed, sequence, position)``, so asking again for a position gives the same noise, whatever
    was asked in between. Without a seed, one is drawn from torch's global generator (so
    ``torch.manual_seed`` still makes a run reproducible).
    """

    def __init__(self, seed: int | None = None) -> None:
        if seed is None:
            seed = int(torch.randint(0, 1 << 62, ()))
        try:
            self.seed = operator.index(seed)  # an int, or an integer type such as numpy's
        except TypeError:
            raise TypeError(f"seed must be an int, got {seed!r}") from None
        self._generators: dict[torch.device, torch.Generator] = {}

    def draw(self, keys: Sequence[tuple[int, int]], vocab_size: int, device: torch.device) -> torch.Tensor:
        """``[len(keys), vocab_size]`` float32 Exp(1) draws, row ``r`` for ``keys[r] = (sequence, position)``."""
        generator = self._generators.get(device)
        if generator is None:
            generator = self._generators[device] = torch.Generator(device=device)
        uniform = torch.empty((len(keys), vocab_size), dtype=torch.float32, device=device)
        for row, (sequence, position) in enumerate(keys):
            generator.manual_seed(_mix(self.seed, sequence, position))
            uniform[row].uniform_(generator=generator)
        # -log(1 - U) is Exp(1). U is a float32 on the grid k * 2**-24, so each value stands for a bin
        # of E; the first bin's lower end is 0, which would make its token (one in 2**24 a draw) win
        # whatever its probability, so it is represented by a point inside the bin instead. What is
        # left is the grid's resolution: tokens below about 2**-25 of the winner's weight lose.
        return torch.log1p(uniform.neg_()).neg_().clamp_(min=_FIRST_BIN)


def _mix(*parts: int) -> int:
    """A hash of ``parts`` (splitmix64's finaliser, chained): nearby keys, unrelated seeds. Folded to
    32 bits, as a CPU generator keeps only the low 32 bits of its seed."""
    state = 0x9E3779B97F4A7C15
    for part in parts:
        state = (state ^ (part & _MASK64)) + 0x9E3779B97F4A7C15 & _MASK64
        state = (state ^ (state >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
        state = (state ^ (state >> 27)) * 0x94D049BB133111EB & _MASK64
        state ^= state >> 31
    return (state ^ state >> 32) & 0xFFFFFFFF


class SamplingSelector(Selector):
    """The plain :class:`~codemask.decoding.pipeline.Selector`: greedy, or sampled per ``SamplingParams``.

    Sampling races each logits row with its position's noise, keyed by the sequence and how many
    tokens it has written. In a decoding loop the selector hears of its rows (``admit``) and keys by
    each row's stable ``key``. A row may bring its own settings, ``row.extra["sampling"] =
    (SamplingParams, seed, stream)`` (a server's per-request sampling): its noise is then keyed by
    its own seed and ``stream`` (0 unless one request asks for several samples), so the row writes
    the same tokens whatever else shares the batch. Used alone, the selector needs
    ``positions(sequence)`` and keys by the sequence's batch index.
    """

    def __init__(self, params: SamplingParams, seed: int | None = None,
                 positions: Callable[[int], int] | None = None) -> None:
        self.params = params
        self.noise = None if params.greedy else PositionNoise(seed)
        self.positions = positions
        self._rows: list[Row] = []
        # row key -> (its own settings, its noise, the key its noise is drawn for)
        self._own: dict[int, tuple[SamplingParams, PositionNoise | None, int]] = {}

    def admit(self, rows: Sequence[Row]) -> None:
        for row in rows:
            self._rows.append(row)
            own = row.extra.get("sampling")
            if own is not None:
                params, seed, *stream = own
                noise = None if params.greedy else PositionNoise(seed)
                self._own[row.key] = (params, noise, int(stream[0]) if stream else 0)

    def retire(self, sequences: Sequence[int]) -> None:
        for index in sequences:
            self._own.pop(self._rows[index].key, None)
        self._rows = without(self._rows, sequences)

    def _settings(self, sequence: int) -> tuple[SamplingParams, PositionNoise | None]:
        if self._rows:
            own = self._own.get(self._rows[sequence].key)
            if own is not None:
                return own[0], own[1]
        return self.params, self.noise

    def _key(self, sequence: int, offset: int) -> tuple[int, int]:
        """(the sequence's noise key, the output position this row stands for)."""
        if self._rows:
            row = self._rows[sequence]
            own = self._own.get(row.key)
            return row.key if own is None else own[2], len(row.token_ids) + offset
        if self.positions is None:
            raise ValueError("sampling needs positions(sequence): the number of tokens each sequence has written")
        return sequence, self.positions(sequence) + offset

    def select(self, logits: torch.Tensor, layout: StepLayout) -> torch.Tensor:
        settings = [self._settings(s) for s in layout.sequences]
        if all(noise is None for _, noise in settings):
            return logits.argmax(dim=-1)
        chosen = logits.argmax(dim=-1)
        groups: dict[tuple[int, int], list[int]] = {}
        for r, (params, noise) in enumerate(settings):
            if noise is not None:
                groups.setdefault((id(params), id(noise)), []).append(r)
        for rows in groups.values():
            params, noise = settings[rows[0]]
            assert noise is not None
            probs = sampling_probabilities(logits[rows], params)
            keys = [self._key(layout.sequences[r], layout.offsets[r]) for r in rows]
            chosen[rows] = exponential_race(probs, noise.draw(keys, probs.shape[-1], probs.device))
        return chosen
