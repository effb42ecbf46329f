"""Hugging Face integration: grammar masks (and RPG's repetition decay, monitors' masks) as ``LogitsProcessor``s.

All three keep a state per row by the row's tokens (:class:`~codemask.decoding.history.HistoryProcessor`),
so greedy, sampling, beam search and batches are one case, and a processor is reusable across
``generate`` calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from codemask.decoding.history import HistoryProcessor, processor_compiler
from codemask.decoding.json_items import ItemScanner, SeparatorTokens, decay_repeated_item_
from codemask.engine.bitmask import allocate_token_bitmask, apply_token_bitmask_
from codemask.engine.compiler import CompiledGrammar
from codemask.engine.matcher import GrammarMatcher
from codemask.errors import MatcherError
from codemask.grammar.resolve import as_grammar
from codemask.monitors.monitor import Monitor
from codemask.monitors.processor import MonitorLogitsProcessor
from codemask.monitors.stage import MonitorSet
from codemask.repetition.processor import RepetitionLogitsProcessor, repetition_logits_processor

__all__ = ["GrammarLogitsProcessor", "MonitorLogitsProcessor", "RepetitionLogitsProcessor", "grammar_logits_processor",
           "monitor_logits_processor", "repetition_logits_processor"]


@dataclass
class _GrammarState:
    matcher: GrammarMatcher
    scanner: ItemScanner | None  # JSON grammars' repeated-item decay


class GrammarLogitsProcessor(HistoryProcessor[_GrammarState]):
    """Masks ``model.generate``'s scores to the tokens ``compiled`` allows; reusable across calls.

    The model's end-of-sequence ids must be stop tokens of the compiled grammar's vocabulary (they
    are when it comes from :func:`grammar_logits_processor`), or a finished grammar has no token
    that ``generate`` recognises as the end.
    """

    def __init__(self, compiled: CompiledGrammar, completion: dict[str, Any] | None = None,
                 item_penalty: float | None = None) -> None:
        super().__init__()
        self.compiled = compiled
        self.completion = completion or {}  # GrammarMatcher options (Grammar.for_completion)
        self.item_penalty = item_penalty  # JSON's repeated-item decay (`codemask.decoding.json_items`)
        self._bitmask: torch.Tensor | None = None

    def start(self, prompt: list[int]) -> _GrammarState:
        return _GrammarState(GrammarMatcher(self.compiled, **self.completion),
                             ItemScanner() if self.item_penalty is not None else None)

    def fork(self, state: _GrammarState) -> _GrammarState:
        return _GrammarState(state.matcher.fork(), None if state.scanner is None else state.scanner.fork())

    def advance(self, state: _GrammarState, token: int) -> _GrammarState:
        if state.matcher.is_terminated():
            return state  # generate pads a finished row: nothing more to follow
        if not state.matcher.accept_token(token):
            raise MatcherError(f"the grammar refuses token {token} chosen by generate(); another logits "
                               "processor or a forced token overrode the grammar mask")
        if state.scanner is not None:
            state.scanner.feed(self.compiled.vocab.token_bytes[token])
        return state

    def apply(self, states: list[_GrammarState], scores: torch.Tensor) -> None:
        bitmask = self._bitmask_for(len(states))
        for row, state in enumerate(states):
            state.matcher.fill_next_token_bitmask(bitmask, row)
        vocab_size = min(self.compiled.vocab_size, scores.shape[-1])
        apply_token_bitmask_(scores, bitmask[: len(states)].to(scores.device, non_blocking=True), vocab_size=vocab_size)
        if self.item_penalty is not None:
            separators = SeparatorTokens.of(self.compiled.vocab)
            for row, state in enumerate(states):
                if state.scanner is not None:
                    decay_repeated_item_(scores[row], state.scanner, self.item_penalty, separators)

    def _bitmask_for(self, rows: int) -> torch.Tensor:
        if self._bitmask is None or self._bitmask.shape[0] < rows:
            self._bitmask = allocate_token_bitmask(rows, self.compiled.vocab_size, pin_memory=True)
        return self._bitmask


def grammar_logits_processor(tokenizer: Any, grammar: Any, model: Any = None) -> GrammarLogitsProcessor:
    """A :class:`GrammarLogitsProcessor` for ``grammar`` (any form ``constrained_generate`` takes).

    With ``model`` the masks are as wide as its logits and its generation config's end-of-sequence
    ids count as stop tokens, so ``generate`` ends exactly where the grammar does.
    """
    resolved = as_grammar(grammar)
    compiled = processor_compiler(tokenizer, model).compile(resolved)
    return GrammarLogitsProcessor(compiled, resolved.completion, resolved.item_penalty)


def monitor_logits_processor(tokenizer: Any, monitors: list[Monitor], model: Any = None) -> MonitorLogitsProcessor:
    """A :class:`~codemask.monitors.processor.MonitorLogitsProcessor` for ``monitors`` (from
    :func:`codemask.monitors.for_workspace`); put it after a grammar processor (the masks AND).

    The prompt is taken as the file's text before the cursor unless the monitors have a ``prefix``;
    ``processor.usage`` counts the steps, server requests, timeouts and time.
    """
    return MonitorLogitsProcessor(MonitorSet(monitors, processor_compiler(tokenizer, model).vocab))
