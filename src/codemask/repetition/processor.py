"""RPG as a Hugging Face ``LogitsProcessor`` (exported as ``codemask.hf.repetition_logits_processor``).

Each row's :class:`~codemask.repetition.state.RepetitionState` is kept by the row's tokens
(:class:`~codemask.decoding.history.HistoryProcessor`), so greedy, sampling, beam search and batches
are one case. Left padding (the tokenizer's pad id before the first real token) is not part of a
row's text.
"""

from __future__ import annotations

from typing import Any

import torch

from codemask.compilers import ordered_stop_token_ids
from codemask.decoding.history import HistoryProcessor, processor_compiler
from codemask.repetition.config import RPG
from codemask.repetition.stage import apply_penalties_
from codemask.repetition.state import RepetitionState


class RepetitionLogitsProcessor(HistoryProcessor[RepetitionState]):
    """Applies RPG's decays to ``model.generate``'s scores; reusable across calls.

    Put it after any masking processor (a grammar's), before temperature and top-k/top-p warpers:
    the decay is defined on the model's distribution.
    """

    def __init__(self, rpg: RPG, token_bytes: list[bytes], stop_token_ids: list[int],
                 pad_token_id: int | None = None) -> None:
        super().__init__(pad_token_id)
        self.rpg = rpg
        self.token_bytes = token_bytes
        self.stop_token_ids = stop_token_ids

    def start(self, prompt: list[int]) -> RepetitionState:
        return RepetitionState(self.rpg, self.token_bytes, prompt)

    def fork(self, state: RepetitionState) -> RepetitionState:
        return state.fork()

    def advance(self, state: RepetitionState, token: int) -> RepetitionState:
        state.append([token])
        return state

    def apply(self, states: list[RepetitionState], scores: torch.Tensor) -> None:
        apply_penalties_(scores, [state.penalties() for state in states], self.rpg, self.stop_token_ids)


def repetition_logits_processor(tokenizer: Any, rpg: RPG | None = None, model: Any = None) -> RepetitionLogitsProcessor:
    """A :class:`RepetitionLogitsProcessor` for ``tokenizer`` (and ``model``'s logits width and stop ids)."""
    vocab = processor_compiler(tokenizer, model).vocab
    stops = ordered_stop_token_ids(vocab.stop_token_ids, model, getattr(tokenizer, "eos_token_id", None))
    return RepetitionLogitsProcessor(rpg or RPG(), vocab.token_bytes, stops, getattr(tokenizer, "pad_token_id", None))
