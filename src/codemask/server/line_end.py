"""Ending a line completion on its line, where the model ends the line.

With ``language`` and ``until="line"``, the code grammar allows EOS wherever the line could end
(with the rest of the cursor's line after it, for a cursor in the middle of a line). But Python's
grammar folds comment lines into the line's NEWLINE, so after the line it still allows comments: a
model that is not shown the suffix — one without fill-in-the-middle tokens — has no reason to pick
EOS where the line could end, and writes the newline and then comments until the token limit.

:class:`LineEnd` reads the model's wish to end the line as the end of the completion. Where the row's
grammar may end:

- the tokens that begin a new line, and those that only repeat the start of the suffix (``)``
  before a suffix ``):``), are given to EOS: the most likely stop token's logit becomes the log of
  the summed probabilities, and those tokens are banned. Greedy decoding ends exactly where the
  model's best token was one of them; sampling ends with their summed probability. The other tokens
  that hold a line break are banned: the model ends or adds to the same line;
- a completion that has already written a line break (a bracketed line may span several) ends: only
  the stop tokens remain.

A chosen token that runs from the completion into the suffix — ``")`` after ``open(name, "rb`` when
the suffix starts with ``)``, ``)\\n`` at the end of a line — is taken back, once per step, and the
row chooses again among the tokens that spell the token's part before the suffix (``"``), so that
the next step, where the line may end, finds the suffix's start (``)``) and ends. Written whole, the
token would repeat the closing text and leave a line that only a comment swallowing the rest of it
could finish.

Where the grammar may not end (inside brackets, before the line is complete) nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from codemask.decoding.pipeline import Stage, StepLayout, without
from codemask.decoding.row import Row
from codemask.engine.token_trie import ByteVocabulary


@dataclass(frozen=True)
class _LineRow:
    """A line-completion row, the bytes after its cursor, and the tokens that end its line."""

    row: Row
    suffix: bytes
    ending_ids: torch.Tensor  # given to EOS where the line may end
    breaking_ids: torch.Tensor  # banned there: the other tokens holding a line break


class LineEnd(Stage):
    """Tokens that end a line completion become EOS where its grammar may end (the rows whose
    ``extra["end_line"]`` is set: ``until="line"`` with a code grammar; the others pass untouched)."""

    def __init__(self, vocab: ByteVocabulary) -> None:
        self.token_bytes = vocab.token_bytes
        self.stop_ids = torch.tensor(sorted(vocab.stop_token_ids), dtype=torch.long)
        self.newline_ids = [i for i, b in enumerate(vocab.token_bytes) if b[:1] in (b"\n", b"\r")]
        self.breaking_ids = {i for i, b in enumerate(vocab.token_bytes) if b"\n" in b or b"\r" in b}
        self.by_bytes: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b and i not in vocab.stop_token_ids:
                self.by_bytes.setdefault(b, []).append(i)
        self.longest = max(map(len, self.by_bytes), default=0)
        self.rows: list[_LineRow | None] = []
        self.rechecked: set[int] = set()  # logits rows already chosen again this step

    def admit(self, rows: Sequence[Row]) -> None:
        self.rows += [self._line_row(row) for row in rows]

    def retire(self, sequences: Sequence[int]) -> None:
        self.rows = without(self.rows, sequences)

    def apply(self, logits: torch.Tensor, layout: StepLayout) -> None:
        self.rechecked = set()
        stops = self.stop_ids[self.stop_ids < logits.shape[-1]].to(logits.device)
        for r, entry in self._line_rows(layout):
            assert entry.row.matcher is not None
            if not entry.row.matcher.can_terminate():
                continue
            row = logits[r]
            if b"\n" in entry.row.text:
                kept = row[stops].clone()
                if bool(torch.isfinite(kept).any()):  # a stop token the stages left open
                    row.fill_(float("-inf"))
                    row[stops] = kept
                continue
            ids = entry.ending_ids.to(logits.device)
            best = stops[torch.argmax(row[stops])]
            row[best] = torch.logsumexp(torch.cat([row[best].reshape(1), row[ids]]), dim=0)
            row[ids] = float("-inf")
            row[entry.breaking_ids.to(logits.device)] = float("-inf")

    def recheck(self, logits: torch.Tensor, layout: StepLayout, chosen: torch.Tensor) -> list[int]:
        """Rows whose chosen token runs from a point where the line may end into the suffix."""
        redo = []
        for r, entry in self._line_rows(layout):
            token = int(chosen[r])
            if r in self.rechecked:
                continue
            head = self._head_before_suffix(entry, self.token_bytes[token])
            if head is None:
                continue
            keep = [i for j in range(1, len(head) + 1) for i in self.by_bytes.get(head[:j], ())]
            row = logits[r]
            kept = row[keep].clone()
            if bool(torch.isfinite(kept).any()):  # the token's part before the suffix, or its start
                row.fill_(float("-inf"))
                row[keep] = kept
            else:
                row[token] = float("-inf")
            self.rechecked.add(r)
            redo.append(r)
        return redo

    def _line_rows(self, layout: StepLayout) -> list[tuple[int, _LineRow]]:
        """(logits row, line row) for each row this stage acts on this step."""
        found = []
        for r, (sequence, offset) in enumerate(zip(layout.sequences, layout.offsets, strict=True)):
            entry = self.rows[sequence]
            if entry is not None and not offset and entry.row.matcher is not None:
                found.append((r, entry))
        return found

    @staticmethod
    def _head_before_suffix(entry: _LineRow, token: bytes) -> bytes | None:
        """The start of ``token`` after which the line may end and the rest of which begins the
        suffix, or None when the token does not run into the suffix."""
        matcher = entry.row.matcher
        assert matcher is not None
        for cut in range(1, len(token)):
            if entry.suffix.startswith(token[cut:]):
                probe = matcher.fork()
                if probe.accept_bytes(token[:cut]) and probe.can_terminate():
                    return token[:cut]
        return None

    def _line_row(self, row: Row) -> _LineRow | None:
        """The row's line-completion state, or None for a row this does not touch."""
        if row.matcher is None or not row.extra.get("end_line") or row.extra.get("ignore_eos"):
            return None
        completion = getattr(row.extra.get("grammar"), "completion", None) or {}
        suffix = completion.get("suffix") or b""
        suffix = suffix.encode("utf-8") if isinstance(suffix, str) else bytes(suffix)
        repeats = {i for k in range(1, min(len(suffix), self.longest) + 1) for i in self.by_bytes.get(suffix[:k], ())}
        ending = repeats.union(self.newline_ids)
        return _LineRow(row, suffix, torch.tensor(sorted(ending), dtype=torch.long),
                        torch.tensor(sorted(self.breaking_ids - ending), dtype=torch.long))
