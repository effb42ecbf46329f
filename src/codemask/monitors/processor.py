"""Monitors as a Hugging Face ``LogitsProcessor`` (exported as ``codemask.hf.monitor_logits_processor``).

A monitor's mask depends only on the text before the cursor: a row's state is its prompt's text and
the bytes generated after it (:class:`~codemask.decoding.history.HistoryProcessor`), and the
monitors cache their answers per trigger position. Left padding and special tokens are not part of
a row's text.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from codemask.decoding.history import HistoryProcessor
from codemask.monitors.stage import MonitorSet, MonitorStats, apply_unless_empty, decode_text


@dataclass(frozen=True)
class _Text:
    prompt: str
    generated: bytes = b""


class MonitorLogitsProcessor(HistoryProcessor[_Text]):
    """Masks ``model.generate``'s scores with the monitors' masks; ``usage`` sums their costs."""

    def __init__(self, monitors: MonitorSet) -> None:
        super().__init__()
        self.monitors = monitors
        self.token_bytes = monitors.vocab.token_bytes
        self.usage = MonitorStats()

    def _bytes(self, tokens: list[int]) -> bytes:
        """Special tokens and padding have no bytes in the vocabulary, so they drop out here."""
        return b"".join(self.token_bytes[t] for t in tokens if 0 <= t < len(self.token_bytes))

    def start(self, prompt: list[int]) -> _Text:
        return _Text(decode_text(self._bytes(prompt)))

    def fork(self, state: _Text) -> _Text:
        return state  # immutable

    def advance(self, state: _Text, token: int) -> _Text:
        return _Text(state.prompt, state.generated + self._bytes([token]))

    def apply(self, states: list[_Text], scores: torch.Tensor) -> None:
        masks = [self.monitors.mask(s.prompt, decode_text(s.generated), self.usage) for s in states]
        rows = [r for r, m in enumerate(masks) if m is not None]
        if rows:
            apply_unless_empty(scores, rows, [m for m in masks if m is not None], self.monitors.width)
