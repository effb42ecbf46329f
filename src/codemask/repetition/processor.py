"""RPG as a Hugging Face ``LogitsProcessor`` (exported as ``codemask.hf.repetition_logits_processor``).

``model.generate`` hands a processor only ``input_ids`` (prompt + generated so far, one row per
sequence or beam) and the scores. As the grammar processor does, this one keys each row's
:class:`~codemask.repetition.state.RepetitionState` by the row's tokens and derives it from its
parent's (the same tokens minus the last), so greedy, sampling, beam search (rows reordered and
forked between steps) and batches are one case; a row with no parent starts a new state. Left
padding (the tokenizer's pad id before the first real token) is not part of a row's text.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size, ordered_stop_token_ids
from codemask.repetition.config import RPG
from codemask.repetition.stage import apply_penalties_
from codemask.repetition.state import RepetitionState

try:
    from transformers import LogitsProcessor
except ImportError:  # transformers is optional: the processor is usable by anything that calls it alike
    LogitsProcessor = object  # type: ignore[misc,assignment]

Row = tuple[int, ...]


class RepetitionLogitsProcessor(LogitsProcessor):
    """Applies RPG's decays to ``model.generate``'s scores; reusable across calls.

    Put it after any masking processor (a grammar's), before temperature and top-k/top-p warpers:
    the decay is defined on the model's distribution.
    """

    def __init__(self, rpg: RPG, token_bytes: list[bytes], stop_token_ids: list[int],
                 pad_token_id: int | None = None) -> None:
        self.rpg = rpg
        self.token_bytes = token_bytes
        self.stop_token_ids = stop_token_ids
        self.pad_token_id = pad_token_id
        self._states: dict[Row, RepetitionState] = {}

    def reset(self) -> None:
        """Forget the current generation."""
        self._states = {}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows: list[Row] = [tuple(r) for r in input_ids.tolist()]
        children = Counter(row[:-1] for row in set(rows))
        states: dict[Row, RepetitionState] = {}
        for row in rows:
            if row not in states:
                states[row] = self._state_of(row, children[row[:-1]] > 1)
        self._states = states
        apply_penalties_(scores, [states[row].penalties() for row in rows], self.rpg, self.stop_token_ids)
        return scores

    def _state_of(self, row: Row, parent_shared: bool) -> RepetitionState:
        """The state after ``row``: its parent's advanced by one token (a copy when beams share the parent)."""
        parent = self._states.get(row[:-1])
        if parent is None:
            return RepetitionState(self.rpg, self.token_bytes, self._unpadded(row))
        state = parent.fork() if parent_shared else parent
        state.append([row[-1]])
        return state

    def _unpadded(self, row: Row) -> list[int]:
        start = 0
        if self.pad_token_id is not None:
            while start < len(row) and row[start] == self.pad_token_id:
                start += 1
        return list(row[start:])


def repetition_logits_processor(tokenizer: Any, rpg: RPG | None = None, model: Any = None) -> RepetitionLogitsProcessor:
    """A :class:`RepetitionLogitsProcessor` for ``tokenizer`` (and ``model``'s logits width and stop ids)."""
    if model is None:
        vocab = compiler_for(tokenizer).vocab
    else:
        vocab = compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model)).vocab
    stops = ordered_stop_token_ids(vocab.stop_token_ids, model, getattr(tokenizer, "eos_token_id", None))
    return RepetitionLogitsProcessor(rpg or RPG(), vocab.token_bytes, stops, getattr(tokenizer, "pad_token_id", None))
