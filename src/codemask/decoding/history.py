"""The base of codemask's Hugging Face ``LogitsProcessor``\\ s: state per row, keyed by the row's tokens.

``model.generate`` hands a processor only ``input_ids`` (the prompt and what it generated so far, a
row per sequence or beam) and the scores. Beams are reordered and forked between steps, so a
processor cannot keep state by row index. :class:`HistoryProcessor` keys each row's state by its
prompt and generated tokens, and derives it from its parent's (the same tokens minus the last)
advanced by one token — a fork when several beams share the parent. Greedy, sampling, beam search
and batches are then one case, and a call whose rows continue nothing starts a new generation
(the processor is reusable across calls). Subclasses say how a state starts, advances and acts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import torch

try:
    from transformers import LogitsProcessor
except ImportError:  # transformers is optional: a processor is usable by anything that calls it alike
    LogitsProcessor = object  # type: ignore[misc,assignment]

S = TypeVar("S")
Key = tuple[tuple[int, ...], tuple[int, ...]]  # (prompt, generated tokens)


class HistoryProcessor(LogitsProcessor, ABC, Generic[S]):
    """A logits processor with one state per distinct (prompt, generated tokens) row."""

    def __init__(self, pad_token_id: int | None = None) -> None:
        self.pad_token_id = pad_token_id
        self._states: dict[Key, S] = {}
        self._prompt_length: int | None = None

    def reset(self) -> None:
        """Forget the current generation (the next call is taken as the start of a new one)."""
        self._states = {}
        self._prompt_length = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        keys = self._keys(input_ids.tolist())
        children = Counter((prompt, generated[:-1]) for prompt, generated in set(keys))
        states: dict[Key, S] = {}
        for key in keys:
            if key not in states:
                states[key] = self._state_of(key, children[(key[0], key[1][:-1])] > 1)
        self._states = states
        self.apply([states[key] for key in keys], scores)
        return scores

    def _keys(self, rows: list[list[int]]) -> list[Key]:
        """Each row's (prompt, generated) key; a new generation when the rows continue none of the last call's."""
        length = len(rows[0]) if rows else 0
        if self._prompt_length is not None and length > self._prompt_length:
            keys = [(tuple(r[: self._prompt_length]), tuple(r[self._prompt_length:])) for r in rows]
            if all((prompt, generated[:-1]) in self._states for prompt, generated in keys):
                return keys
        self.reset()
        self._prompt_length = length
        return [(tuple(r), ()) for r in rows]

    def _state_of(self, key: Key, parent_shared: bool) -> S:
        prompt, generated = key
        if not generated:
            return self.start(self._unpadded(prompt))
        parent = self._states[(prompt, generated[:-1])]
        return self.advance(self.fork(parent) if parent_shared else parent, generated[-1])

    def _unpadded(self, prompt: Sequence[int]) -> list[int]:
        """The prompt without the left padding a batch gives shorter prompts."""
        start = 0
        if self.pad_token_id is not None:
            while start < len(prompt) and prompt[start] == self.pad_token_id:
                start += 1
        return list(prompt[start:])

    @abstractmethod
    def start(self, prompt: list[int]) -> S:
        """The state of a row that has generated nothing after ``prompt``."""

    @abstractmethod
    def fork(self, state: S) -> S:
        """An independent copy of ``state`` (beams that share a parent advance apart)."""

    @abstractmethod
    def advance(self, state: S, token: int) -> S:
        """``state`` after ``token`` (it may be updated in place and returned)."""

    @abstractmethod
    def apply(self, states: list[S], scores: torch.Tensor) -> None:
        """Edit ``scores`` (one row per state, in order) in place."""


def processor_compiler(tokenizer: Any, model: Any = None) -> Any:
    """The shared compiler a processor masks with: ``model``'s logits width and stop ids when given."""
    from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size

    if model is None:
        return compiler_for(tokenizer)
    return compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))
