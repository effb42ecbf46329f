"""Monitors as a Hugging Face ``LogitsProcessor`` (exported as ``codemask.hf.monitor_logits_processor``).

A monitor's mask depends only on the text before the cursor, so the processor keeps no state per
beam: each call decodes every row (prompt, then what ``generate`` appended) and asks the monitors,
whose answers are cached per trigger position — greedy, sampling, beam search and batches are one
case. The first call of a ``generate`` fixes the prompt length; a call whose rows are not longer
than that starts a new generation. Left padding and special tokens are not part of a row's text.
"""

from __future__ import annotations

import torch

from codemask.monitors.stage import MonitorSet, MonitorUsage, apply_unless_empty, decode_text

try:
    from transformers import LogitsProcessor
except ImportError:  # transformers is optional: the processor is usable by anything that calls it alike
    LogitsProcessor = object  # type: ignore[misc,assignment]


class MonitorLogitsProcessor(LogitsProcessor):
    """Masks ``model.generate``'s scores with the monitors' masks; ``usage`` sums their costs."""

    def __init__(self, monitors: MonitorSet) -> None:
        self.monitors = monitors
        self.token_bytes = monitors.vocab.token_bytes
        self.usage = MonitorUsage()
        self._prompt_length: int | None = None
        self._prompts: dict[tuple[int, ...], str] = {}

    def reset(self) -> None:
        """Forget the current generation (the next call is taken as the start of a new one)."""
        self._prompt_length = None
        self._prompts = {}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        length = input_ids.shape[1]
        if self._prompt_length is None or length <= self._prompt_length:
            self.reset()
            self._prompt_length = length
        ids = input_ids.tolist()
        masks = [self.monitors.mask(self._prompt_of(row), self._text(row[self._prompt_length:]), self.usage)
                 for row in ids]
        rows = [r for r, m in enumerate(masks) if m is not None]
        if rows:
            apply_unless_empty(scores, rows, [m for m in masks if m is not None], self.monitors.width)
        return scores

    def _prompt_of(self, row: list[int]) -> str:
        assert self._prompt_length is not None
        key = tuple(row[: self._prompt_length])
        prompt = self._prompts.get(key)
        if prompt is None:
            prompt = self._prompts[key] = self._text(list(key))
        return prompt

    def _text(self, tokens: list[int]) -> str:
        """Special tokens and padding have no bytes in the vocabulary, so they drop out here."""
        return decode_text(b"".join(self.token_bytes[t] for t in tokens if 0 <= t < len(self.token_bytes)))
