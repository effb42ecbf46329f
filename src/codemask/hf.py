"""Hugging Face integration: grammar masks (and RPG's repetition decay, monitors' masks) as ``LogitsProcessor``s.

``model.generate`` hands a processor only ``input_ids`` (prompt + generated so far, one row per
sequence or beam) and the scores. Beams are reordered and forked between steps, so the processor
keys matcher states by the generated tokens themselves: each row's state is its parent's (the same
tokens minus the last) advanced by one token. That makes greedy, sampling, beam search and batches
all the same case, and a fresh ``generate`` call is recognised because its rows have no parent.
"""

from __future__ import annotations

from typing import Any

import torch

from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size
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

try:
    from transformers import LogitsProcessor
except ImportError:  # transformers is optional: the processor is usable by anything that calls it alike
    LogitsProcessor = object  # type: ignore[misc,assignment]

__all__ = ["GrammarLogitsProcessor", "MonitorLogitsProcessor", "RepetitionLogitsProcessor", "grammar_logits_processor",
           "monitor_logits_processor", "repetition_logits_processor"]

History = tuple[int, ...]


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks ``model.generate``'s scores to the tokens ``compiled`` allows; reusable across calls.

    The model's end-of-sequence ids must be stop tokens of the compiled grammar's vocabulary (they
    are when it comes from :func:`grammar_logits_processor`), or a finished grammar has no token
    that ``generate`` recognises as the end.
    """

    def __init__(self, compiled: CompiledGrammar, completion: dict[str, Any] | None = None,
                 item_penalty: float | None = None) -> None:
        self.compiled = compiled
        self.completion = completion or {}  # GrammarMatcher options (Grammar.for_completion)
        self.item_penalty = item_penalty  # JSON's repeated-item decay (`codemask.decoding.json_items`)
        self._states: dict[History, GrammarMatcher] = {}
        self._scanners: dict[History, ItemScanner] = {}
        self._prompt_length: int | None = None
        self._bitmask: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget the current generation (the next call is taken as the start of a new one)."""
        self._states = {}
        self._scanners = {}
        self._prompt_length = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        histories = self._histories(input_ids)
        states: dict[History, GrammarMatcher] = {}
        bitmask = self._bitmask_for(len(histories))
        for row, history in enumerate(histories):
            matcher = states.get(history) or self._state_of(history)
            states[history] = matcher
            matcher.fill_next_token_bitmask(bitmask, row)
        self._states = states
        vocab_size = min(self.compiled.vocab_size, scores.shape[-1])
        apply_token_bitmask_(scores, bitmask[: len(histories)].to(scores.device, non_blocking=True),
                             vocab_size=vocab_size)
        if self.item_penalty is not None:
            self._decay_repeated_items(histories, scores, self.item_penalty)
        return scores

    def _decay_repeated_items(self, histories: list[History], scores: torch.Tensor, penalty: float) -> None:
        scanners: dict[History, ItemScanner] = {}
        separators = SeparatorTokens.of(self.compiled.vocab)
        for row, history in enumerate(histories):
            scanner = scanners.get(history)
            if scanner is None:
                parent = self._scanners.get(history[:-1]) if history else None
                scanner = ItemScanner() if parent is None else parent.fork()
                if history and parent is not None:
                    scanner.feed(self.compiled.vocab.token_bytes[history[-1]])
                elif history:  # no parent kept: read the whole history
                    for token in history:
                        scanner.feed(self.compiled.vocab.token_bytes[token])
                scanners[history] = scanner
            decay_repeated_item_(scores[row], scanner, penalty, separators)
        self._scanners = scanners

    def _histories(self, input_ids: torch.Tensor) -> list[History]:
        """Each row's generated tokens; starts a new generation when the rows do not continue the last one."""
        length = input_ids.shape[1]
        if self._prompt_length is not None and length > self._prompt_length:
            histories = [tuple(r) for r in input_ids[:, self._prompt_length:].tolist()]
            if all(h[:-1] in self._states for h in histories):
                return histories
        self._prompt_length = length
        self._states = {}
        return [()] * input_ids.shape[0]

    def _state_of(self, history: History) -> GrammarMatcher:
        if not history:
            return GrammarMatcher(self.compiled, **self.completion)
        matcher = self._states[history[:-1]].fork()
        if matcher.is_terminated():
            return matcher  # generate pads a finished row: nothing more to follow
        if not matcher.accept_token(history[-1]):
            raise MatcherError(f"the grammar refuses token {history[-1]} chosen by generate(); another logits "
                               "processor or a forced token overrode the grammar mask")
        return matcher

    def _bitmask_for(self, rows: int) -> torch.Tensor:
        if self._bitmask is None or self._bitmask.shape[0] < rows:
            self._bitmask = allocate_token_bitmask(rows, self.compiled.vocab_size, pin_memory=True)
        return self._bitmask


def grammar_logits_processor(tokenizer: Any, grammar: Any, model: Any = None) -> GrammarLogitsProcessor:
    """A :class:`GrammarLogitsProcessor` for ``grammar`` (any form ``constrained_generate`` takes).

    With ``model`` the masks are as wide as its logits and its generation config's end-of-sequence
    ids count as stop tokens, so ``generate`` ends exactly where the grammar does.
    """
    if model is None:
        compiler = compiler_for(tokenizer)
    else:
        compiler = compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))
    resolved = as_grammar(grammar)
    return GrammarLogitsProcessor(compiler.compile(resolved), resolved.completion, resolved.item_penalty)


def monitor_logits_processor(tokenizer: Any, monitors: list[Monitor], model: Any = None) -> MonitorLogitsProcessor:
    """A :class:`~codemask.monitors.processor.MonitorLogitsProcessor` for ``monitors`` (from
    :func:`codemask.monitors.for_workspace`); put it after a grammar processor (the masks AND).

    The prompt is taken as the file's text before the cursor unless the monitors have a ``prefix``;
    ``processor.usage`` counts the steps, server requests, timeouts and time.
    """
    if model is None:
        vocab = compiler_for(tokenizer).vocab
    else:
        vocab = compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model)).vocab
    return MonitorLogitsProcessor(MonitorSet(monitors, vocab))
