"""The decoding loop: rows stepped together over one KV cache, joining and leaving between steps.

A :class:`DecodingLoop` owns the sequences it decodes (:class:`~codemask.decoding.row.Row`: prompt,
matcher, options, output so far) and one batched KV cache in which row ``i`` of the batch is
sequence ``i``. A step is: start the stages' CPU work, run one forward pass over every row's new
tokens, let the pipeline mask and pick, commit (with the forced continuation of jump-forward, stop
strings and the token budget), and let finished rows go.

**Continuous batching.** :meth:`DecodingLoop.admit` adds sequences between any two steps: each gets
an empty cache row (every existing column a hole its attention mask hides) and its prompt is fed in
the next step beside the other rows' single tokens. :meth:`DecodingLoop.retire` removes sequences
(finished or cancelled) from the cache, the attention mask and every stage. Rows receive different
numbers of tokens in one step, so each step's chunk is right-aligned per row and padded on the left
with positions the attention mask hides; position ids come from the mask, so each row sees its own
tokens contiguously, exactly as if it were decoded alone (up to the float rounding of a batched
matmul). Columns that no row attends to any more are dropped when they make up a quarter of the cache.

Why an own loop rather than ``model.generate``: jump-forward appends several tokens per step,
speculative verification scores K+1 positions per sequence, AdaDec rolls candidates out from the
middle of a step, and a server admits requests between steps — none of which a logits processor can
do. transformers' own continuous batching (``generate_batch``) schedules paged attention but gives a
step no place for stages that choose among drafted positions or commit forced text, so codemask keeps
its own loop over the model's dynamic cache.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import torch

from codemask.decoding import kv
from codemask.decoding.grammar import GrammarStage
from codemask.decoding.pipeline import Continuation, Pipeline, StepLayout, without
from codemask.decoding.row import Row
from codemask.engine.matcher import GrammarMatcher
from codemask.engine.token_trie import ByteVocabulary

_COMPACT_SHARE = 0.25  # drop unattended cache columns once they are this share of the cache


class DecodingLoop:
    """The state of a batched generation: the KV cache, its attention mask and the rows in it."""

    def __init__(self, model: Any, tokenizer: Any, vocab: ByteVocabulary, pipeline: Pipeline, stage: GrammarStage,
                 device: torch.device | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.pipeline = pipeline
        self.stage = stage
        self.device = device if device is not None else next(model.parameters()).device
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else (getattr(vocab, "eos_token_id", None) or 0)
        self.rows: list[Row] = []
        self.feeds: list[list[int]] = []  # per row, the tokens the next forward pass feeds
        self.cache: Any = None
        self.attention: torch.Tensor | None = None
        self.next_logits: torch.Tensor | None = None  # handed over with a cache that holds every fed token
        self._keys = itertools.count()

    # -- sequences joining and leaving -------------------------------------------------------

    def admit(self, rows: Sequence[Row]) -> None:
        """Add ``rows`` after the current ones; their prompts are fed in the next step."""
        if not rows:
            return
        if self.next_logits is not None:
            raise RuntimeError("a sequence cannot join while a handed-over step is pending")
        now = time.perf_counter()
        for row in rows:
            if row.key < 0:
                row.key = next(self._keys)
            row.started = now
        if self.cache is not None:
            assert self.attention is not None
            kv.append_empty_rows(self.cache, len(rows))
            self.attention = torch.cat([self.attention, self.attention.new_zeros((len(rows), self.attention.shape[1]))])
        first = len(self.rows)
        self.rows += rows
        self.feeds += [list(row.prompt_ids) for row in rows]
        self.pipeline.admit(rows)
        for index in range(first, len(self.rows)):  # a grammar that allows nothing but the end
            if self.stage.only_stop_allowed(index):
                self.rows[index].finish_reason = "grammar_end"

    def cancel(self, row: Row) -> None:
        """Stop decoding ``row``: it leaves at the end of the current or next step."""
        if row.finish_reason is None:
            row.finish_reason = "cancelled"

    def retire(self, indices: Sequence[int]) -> list[Row]:
        """Remove the rows at ``indices``: their stats are recorded, their cache rows dropped."""
        indices = sorted(set(indices))
        if not indices:
            return []
        now = time.perf_counter()
        leaving = [self.rows[i] for i in indices]
        for row in leaving:
            row.stats.generated_tokens = len(row.token_ids)
            row.stats.wall_time_s = now - row.started
        self.pipeline.retire(indices, [row.stats for row in leaving])
        self.rows = without(self.rows, indices)
        self.feeds = without(self.feeds, indices)
        if self.cache is not None:
            assert self.attention is not None
            if self.rows:
                staying = [i for i in range(self.attention.shape[0]) if i not in set(indices)]
                kv.select_rows(self.cache, staying)
                self.attention = self.attention[staying]
                self._compact()
            else:
                self.cache = self.attention = None
        return leaving

    def retire_finished(self) -> list[Row]:
        return self.retire([i for i, row in enumerate(self.rows) if row.finish_reason is not None])

    def _compact(self) -> None:
        """Drop cache columns no row attends to, when they are a quarter of the cache or more."""
        assert self.attention is not None
        live = self.attention.any(dim=0)
        holes = int((~live).sum())
        if holes and holes >= _COMPACT_SHARE * self.attention.shape[1]:
            columns = torch.nonzero(live).flatten()
            kv.keep_columns(self.cache, columns)
            self.attention = self.attention[:, columns]

    # -- the step ----------------------------------------------------------------------------

    def step(self) -> list[Row]:
        """One forward pass for every open row; returns the rows that finished (now retired)."""
        finished = self.retire_finished()
        if not self.rows:
            return finished
        active = list(range(len(self.rows)))
        layout = StepLayout.one_row_per_sequence(active)
        self.pipeline.prepare(layout)
        if self.next_logits is not None:  # a single row whose next logits a rollout computed
            logits, self.next_logits = self.next_logits, None
        else:
            logits = self.forward(self.feeds)[:, -1]
            for row in self.rows:
                row.stats.forward_passes += 1
        chosen = self.pipeline.process(logits, layout).tolist()
        for i, token in enumerate(chosen):
            committed = self.advance(i, int(token))
            fed = self.take_over(i, committed)
            self.feeds[i] = committed if fed is None else fed
        return finished + self.retire_finished()

    def run(self) -> None:
        """Step until every row has finished."""
        while self.rows:
            self.step()

    # -- one row, one step -------------------------------------------------------------------

    def advance(self, index: int, token: int) -> list[int]:
        """Commit the chosen ``token`` (and any forced continuation) to row ``index``; return what to
        feed next."""
        row = self.rows[index]
        options = row.options
        row.stats.steps += 1
        if token in self.vocab.stop_token_ids:
            if row.matcher is not None:
                self.pipeline.commit(index, [token])
            row.finish_reason = "grammar_end" if row.matcher is not None else "stop"
            return [self.pad_id]
        budget = options.max_new_tokens - len(row.token_ids)
        tokens = self.jump_forward(row.matcher, token, budget) if options.jump_forward and row.matcher else [token]
        row.stats.grammar.forced_tokens += len(tokens) - 1
        known = self.pipeline.selector.known_continuation(index)
        if len(tokens) == 1 and known:
            tokens = self._continued(row, token, known[: budget - 1])
            row.stats.steps += len(tokens) - 1
        self.pipeline.commit(index, tokens)
        row.token_ids.extend(tokens)
        before = len(row.text)
        new_bytes = self.bytes_of(tokens)
        row.text += new_bytes
        if options.on_token is not None:
            options.on_token(row.key, tokens, row.stream.decode(new_bytes))
        if self._hit_stop_string(row, before):
            row.finish_reason = "stop"
        elif self.stage.only_stop_allowed(index):
            row.finish_reason = "grammar_end"
        elif len(row.token_ids) >= options.max_new_tokens:
            row.finish_reason = "length"
        return tokens

    def take_over(self, index: int, committed: list[int]) -> list[int] | None:
        """Install the KV cache the selector hands over after ``committed`` (AdaDec's chosen rollout
        computed it; only for a loop that decodes one sequence) and return what to feed next: the
        last committed token, or nothing when the cache holds all of them and the next position's
        logits came with it (``next_logits``). None when the selector hands nothing over."""
        if len(self.rows) != 1 or self.rows[index].finish_reason is not None:
            return None
        handed: Continuation | None = self.pipeline.selector.continuation_cache(index, committed)
        if handed is None:
            return None
        self.cache, self.attention = handed.cache, handed.attention
        if handed.next_logits is None:
            return committed[-1:]
        self.next_logits = handed.next_logits
        return []

    def _continued(self, row: Row, token: int, known: list[int]) -> list[int]:
        """``token`` and the selector's ``known`` next picks, up to where plain decoding would part
        from them: a token the grammar refuses, one after which the grammar forces bytes (jump-forward
        would commit those), or the end of a stop string."""
        stops, jump_forward = row.options.stops, row.options.jump_forward
        probe = row.matcher.fork() if row.matcher is not None else None
        if probe is not None and not probe.accept_token(token):
            return [token]
        tokens = [token]
        text = bytes(row.text) + self.vocab.token_bytes[token]
        if _ends_in_stop(text, len(row.text), stops):
            return tokens
        for nxt in known:
            if probe is not None and ((jump_forward and len(self.jump_forward(probe, nxt, 2)) > 1)
                                      or not probe.accept_token(nxt)):
                break
            tokens.append(nxt)
            before = len(text)
            text += self.vocab.token_bytes[nxt]
            if _ends_in_stop(text, before, stops):
                break
        return tokens

    @staticmethod
    def _hit_stop_string(row: Row, before: int) -> bool:
        for stop in row.options.stops:
            at = row.text.find(stop, max(0, before - len(stop) + 1))
            if at >= 0 and (row.stop_at is None or at < row.stop_at):
                row.stop_at = at
        return row.stop_at is not None

    def jump_forward(self, matcher: GrammarMatcher, token: int, budget: int) -> list[int]:
        """``token`` followed by what the grammar forces, re-tokenised the way the tokenizer would.

        The chosen token and the forced bytes are encoded together, so the boundary between them gets
        the tokens the model would have produced itself; the last of those tokens is left to the model
        (it could merge with what comes after the forced text). Anything that does not round-trip
        exactly, or that the grammar would refuse, falls back to the chosen token alone.
        """
        probe = matcher.fork()
        if not probe.accept_token(token):
            return [token]
        forced = probe.find_jump_forward_bytes()
        if not forced:
            return [token]
        text = self.vocab.token_bytes[token] + forced
        try:
            retokenised = list(self.tokenizer.encode(text.decode("utf-8"), add_special_tokens=False))
        except UnicodeDecodeError:
            return [token]
        if self.bytes_of(retokenised) != text:
            return [token]
        keep = retokenised[:-1][:budget]
        if len(self.bytes_of(keep)) <= len(self.vocab.token_bytes[token]):
            return [token]
        probe = matcher.fork()
        if not all(probe.accept_token(t) for t in keep):
            return [token]
        return keep

    def bytes_of(self, token_ids: Sequence[int]) -> bytes:
        return b"".join(self.vocab.token_bytes[t] for t in token_ids)

    # -- the model ---------------------------------------------------------------------------

    def forward(self, feeds: Sequence[Sequence[int]], keep: int = 1) -> torch.Tensor:
        """Run the model on each row's new tokens (right-aligned); the last ``keep`` positions' logits
        per row, ``[rows, keep, vocab]`` (speculative verification keeps K+1)."""
        width = max(len(f) for f in feeds)
        ids = torch.full((len(feeds), width), self.pad_id, dtype=torch.long)
        real = torch.zeros((len(feeds), width), dtype=torch.long)
        for r, feed in enumerate(feeds):
            if feed:
                ids[r, width - len(feed):] = torch.tensor(list(feed), dtype=torch.long)
                real[r, width - len(feed):] = 1
        ids, real = ids.to(self.device), real.to(self.device)
        if self.cache is None:
            self.cache = kv.new_cache(self.model)
            self.attention = real
        else:
            assert self.attention is not None
            self.attention = torch.cat([self.attention, real], dim=1)
        positions = (self.attention.cumsum(-1) - 1).clamp(min=0)[:, -width:]
        logits, self.cache = kv.run_model(self.model, self.cache, input_ids=ids, attention_mask=self.attention,
                                          position_ids=positions, logits_to_keep=keep)
        # a copy: the model ran in inference mode, and stages edit the logits in place outside it
        return logits[:, -keep:, :].to(torch.float32, copy=True)


def _ends_in_stop(text: bytes, before: int, stops: list[bytes]) -> bool:
    """Whether a stop string occurs in ``text`` and ends after byte ``before``."""
    return any(stop in text[max(0, before - len(stop) + 1):] for stop in stops)
