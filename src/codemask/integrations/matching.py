"""One request's grammar state as a serving engine sees it: its own stop tokens and its own mask width.

A compiled grammar knows the stop tokens of its vocabulary (EOS and the chat models' end-of-turn
tokens). A serving engine decides per request which tokens end it (vLLM's
``SamplingParams.all_stop_token_ids``: the model's EOS and the user's ``stop_token_ids``) and ends the
request when it samples one. A grammar that allowed another stop token would let the model write a
token the engine does not stop at, after which the engine no longer constrains the output; one that
forbade the request's stop token would never let it end. :class:`RequestMatcher` therefore allows
exactly the request's stop tokens, where the grammar may end — as xgrammar's
``override_stop_tokens`` does — without compiling the grammar again per stop set.

Masks are as wide as the engine's logits (``vocab_size`` tokens): a tokenizer with more ids than
the model has outputs has its extra ids dropped from the mask, since they cannot be sampled.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from codemask.engine.bitmask import bitmask_width, host_array
from codemask.engine.compiler import CompiledGrammar
from codemask.engine.matcher import GrammarMatcher
from codemask.errors import MatcherError


class RequestMatcher:
    """A :class:`GrammarMatcher` that stops at the request's stop tokens and fills rows ``width`` tokens wide.

    Termination (accepting a stop token) counts as one accepted token, so ``rollback(1)`` right after
    it reopens the request, as the engines' own backends do.
    """

    def __init__(self, compiled: CompiledGrammar, stop_token_ids: Iterable[int] | None, width: int) -> None:
        self.compiled = compiled
        self.width = width
        self._matcher = GrammarMatcher(compiled)
        vocab_stops = compiled.vocab.stop_token_ids
        requested = frozenset(int(t) for t in stop_token_ids or ())
        self.stop_token_ids = requested or vocab_stops
        self._terminated = False
        # bits to correct in a filled row: stops of the vocabulary the request does not stop at, and the reverse
        self._never = np.array(sorted(t for t in vocab_stops - self.stop_token_ids if t < width), dtype=np.int64)
        self._at_end = np.array(sorted(t for t in self.stop_token_ids - vocab_stops if 0 <= t < width),
                                dtype=np.int64)
        self._stops_in_row = np.array(sorted(t for t in self.stop_token_ids if 0 <= t < width), dtype=np.int64)
        self._words = bitmask_width(width)
        tail = width % 32
        self._tail = np.uint32((1 << tail) - 1) if tail and compiled.vocab.vocab_size > width else None

    # -- state ---------------------------------------------------------------------------------

    def is_terminated(self) -> bool:
        """Whether one of the request's stop tokens has been accepted."""
        return self._terminated

    def can_terminate(self) -> bool:
        """Whether a stop token is allowed now (the text so far is complete)."""
        return not self._terminated and self._matcher.can_terminate()

    @property
    def num_accepted(self) -> int:
        """Tokens accepted since the start (termination included)."""
        return self._matcher.num_accepted + self._terminated

    def accept(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) where the mask forbids it or after termination."""
        if self._terminated:
            return False
        token_id = int(token_id)
        if token_id in self.stop_token_ids:
            self._terminated = self._matcher.can_terminate()
            return self._terminated
        if token_id in self.compiled.vocab.stop_token_ids or not 0 <= token_id < self.width:
            return False
        return self._matcher.accept_token(token_id)

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (a :class:`MatcherError` past the start)."""
        if not 0 <= num_tokens <= self.num_accepted:
            raise MatcherError(f"cannot roll back {num_tokens} tokens: {self.num_accepted} accepted")
        if num_tokens and self._terminated:
            self._terminated = False
            num_tokens -= 1
        self._matcher.rollback(num_tokens)

    def reset(self) -> None:
        """Back to the start of the request."""
        self._terminated = False
        self._matcher.reset()

    def fork(self) -> RequestMatcher:
        """An independent copy in the same state."""
        twin = RequestMatcher.__new__(RequestMatcher)
        twin.__dict__.update(self.__dict__)
        twin._matcher = self._matcher.fork()
        return twin

    def jump_forward_bytes(self) -> bytes:
        """The bytes the grammar forces from here (empty where it offers a choice, or after termination)."""
        return b"" if self._terminated else self._matcher.find_jump_forward_bytes()

    # -- masks ---------------------------------------------------------------------------------

    def fill_row(self, bitmask: Any, row: int) -> None:
        """Write the next-token mask into row ``row`` of an int32 bitmask on the CPU (torch or numpy)."""
        target = _row(bitmask, row)
        if target.shape[0] < self._words:
            raise ValueError(f"bitmask rows have {target.shape[0]} words, {self.width} tokens need {self._words}")
        if self._terminated:
            target[:] = 0
            _set(target, self._stops_in_row)
            return
        words = self._matcher.next_token_bitmask().view(np.uint32)
        n = min(len(words), self._words)
        target[:n] = words[:n]
        target[n:] = 0
        if self._tail is not None:
            target[self._words - 1] &= self._tail
        if len(self._never):
            _clear(target, self._never)
        if len(self._at_end) and self._matcher.can_terminate():
            _set(target, self._at_end)


def _row(bitmask: Any, row: int) -> np.ndarray:
    """Row ``row`` of a CPU int32 bitmask as a writable uint32 numpy view."""
    array = host_array(bitmask)
    if array.dtype != np.int32:
        raise ValueError(f"a token bitmask is int32, got {array.dtype}")
    return array[row].view(np.uint32)


def _set(words: np.ndarray, ids: np.ndarray) -> None:
    np.bitwise_or.at(words, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))


def _clear(words: np.ndarray, ids: np.ndarray) -> None:
    np.bitwise_and.at(words, ids >> 5, ~(np.uint32(1) << (ids & 31).astype(np.uint32)))
