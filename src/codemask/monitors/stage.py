"""Monitors as a decoding stage: the language server's masks ANDed into the step's logits.

On an accelerator :meth:`MonitorStage.prepare` runs the monitors in a worker thread while the
model's forward pass runs (the server is another process; waiting on its pipe releases the GIL),
and :meth:`MonitorStage.apply` waits for them and masks the rows. On a CPU ``prepare`` computes the
masks that need no server and sends the requests the others need, and ``apply`` finishes them with
the answers that came during the forward pass (see :class:`MonitorStage` for why). A probe for a
merged ``.name`` token may be deferred to :meth:`MonitorStage.recheck`, after the choice. The stage
runs after the grammar stage, so its ``-inf`` lands on logits the grammar already masked: the result
is the AND of the two masks. If that AND would leave a row with no token at all (the grammar and the server disagree),
the row keeps the grammar's mask alone — on the device, without a host synchronisation.
"""

from __future__ import annotations

import codecs
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from codemask.decoding.pipeline import Stage, StepLayout, without
from codemask.decoding.row import Row
from codemask.decoding.stats import GenerationStats, MonitorStats
from codemask.engine.bitmask import apply_token_bitmask_, pack_bool_mask
from codemask.engine.token_trie import ByteVocabulary
from codemask.monitors.masks import NameMasks, name_masks
from codemask.monitors.monitor import DeferredMask, Monitor, StepMask


@dataclass
class StepMasks:
    """One text's masks: the AND of those known now (None: none), and those deferred."""

    mask: np.ndarray | None
    deferred: list[DeferredMask]

    def resolved(self) -> np.ndarray | None:
        """The AND of all of them, the deferred ones resolved now."""
        return _and_all([self.mask, *(d.resolve() for d in self.deferred)])


class MonitorSet:
    """Monitors with the name masks of their languages over one vocabulary; one step's masks per text."""

    def __init__(self, monitors: Sequence[Monitor], vocab: ByteVocabulary, width: int | None = None) -> None:
        self.monitors = list(monitors)
        self.vocab = vocab
        self.width = max(width or 0, vocab.vocab_size)
        self._masks: dict[str, NameMasks] = {}
        for monitor in self.monitors:
            chars = monitor.language.break_characters
            if chars not in self._masks:
                self._masks[chars] = name_masks(vocab, chars, self.width)

    def mask(self, prompt: str, generated: str, usage: MonitorStats) -> np.ndarray | None:
        """The AND of every monitor's masks for this text, deferred ones resolved (None: no monitor
        constrains it)."""
        return self.step_masks(prompt, generated, usage).resolved()

    def items_ahead(self, prompt: str, generated: str, usage: MonitorStats) -> dict[int, list[StepMask]]:
        """Each monitor's items for this text, by its index, where they need no server request; the
        others' requests are sent, to be answered while the model's forward pass runs
        (:meth:`Monitor.items_ahead`). Pass the result to :meth:`step_masks` for the same text."""
        started = time.perf_counter()
        known: dict[int, list[StepMask]] = {}
        texts: dict[int, str] = {}
        for index, monitor in enumerate(self.monitors):
            text = texts.setdefault(id(monitor.file), monitor.document_text(prompt, generated))
            items = monitor.items_ahead(text, self._masks[monitor.language.break_characters])
            if items is not None:
                known[index] = items
        usage.time_s += time.perf_counter() - started
        return known

    def step_masks(self, prompt: str, generated: str, usage: MonitorStats,
                   ahead: dict[int, list[StepMask]] | None = None) -> StepMasks:
        """The AND of the masks every monitor knows for this text, and the masks they deferred
        (whose resolution is counted in ``usage`` when it happens). ``ahead``: the items
        :meth:`items_ahead` found for this text, not computed again."""
        started = time.perf_counter()
        known: list[np.ndarray] = []
        deferred: list[DeferredMask] = []
        texts: dict[int, str] = {}  # one text object per file: the scanner's cache keys on it
        step = _StepCount(usage)
        for index, monitor in enumerate(self.monitors):
            if ahead is not None and index in ahead:
                items = ahead[index]
            else:
                text = texts.setdefault(id(monitor.file), monitor.document_text(prompt, generated))
                items = step.counted(monitor, monitor.step_items, text, self._masks[monitor.language.break_characters])
            for item in items:
                if isinstance(item, DeferredMask):
                    deferred.append(DeferredMask(item.scope, functools.partial(step.counted, monitor, item.resolve)))
                else:
                    known.append(item)
        combined = _and_all(known)
        step.close(masked=combined is not None)
        usage.time_s += time.perf_counter() - started
        return StepMasks(combined, deferred)


class _StepCount:
    """Counts one step's server requests, timeouts and time into its usage, also those of a deferred
    mask resolved after the step (after :meth:`close`); the step counts once as monitored, when it
    masked or asked."""

    def __init__(self, usage: MonitorStats) -> None:
        self.usage = usage
        self.closed = False
        self.asked = False
        self.monitored = False

    def counted(self, monitor: Monitor, work: Callable[..., Any], *args: Any) -> Any:
        before = (monitor.counters.queries, monitor.counters.timeouts)
        started = time.perf_counter()
        result = None
        try:
            result = work(*args)
            return result
        finally:
            self.asked = self.asked or monitor.counters.queries > before[0]
            self.usage.queries += monitor.counters.queries - before[0]
            self.usage.timeouts += monitor.counters.timeouts - before[1]
            if self.closed:  # a deferred resolution: its time is not in the step's own
                self.usage.time_s += time.perf_counter() - started
                self._mark(masked=result is not None)

    def close(self, masked: bool) -> None:
        self.closed = True
        self._mark(masked)

    def _mark(self, masked: bool) -> None:
        if (masked or self.asked) and not self.monitored:
            self.usage.steps += 1
            self.monitored = True


def decode_text(data: bytes) -> str:
    """UTF-8 text of ``data`` without a trailing incomplete character (the next token completes it)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=False)


class MonitorStage(Stage):
    """The monitors over a batch: per sequence its prompt and generated bytes.

    With ``overlap`` the monitors run in a worker thread while the forward pass runs. Without, the
    stage works in two halves on the main thread: :meth:`prepare` computes the masks that need no
    server and sends the requests the others need (:meth:`Monitor.items_ahead`), :meth:`apply`
    computes those with the answers that arrived meanwhile. ``constrained_generate`` overlaps only
    on an accelerator: on a CPU the worker's Python holds the GIL between the forward pass's
    operators, and the overlapped monitors added 3.8 ms of wall time per monitored step where the
    same work in turn added 1.8 ms, and in two halves 1.6 ms (Qwen2.5-Coder, pyrefly, 2 cores, the
    monitors benchmark's tasks, timed with ad-hoc interleaving scripts).
    """

    def __init__(self, monitors: MonitorSet, prompts: Sequence[str], *, overlap: bool = True,
                 defer: bool = False) -> None:
        self.monitors = monitors
        self.defer = defer
        self.token_bytes = monitors.vocab.token_bytes
        self.prompts = list(prompts)
        self.generated: list[list[bytes]] = [[] for _ in self.prompts]
        self.usage = [MonitorStats() for _ in self.prompts]
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="codemask-monitor") if overlap else None
        self._pending: Future[list[StepMasks]] | None = None
        self._pending_layout: StepLayout | None = None
        self._ahead: list[dict[int, list[StepMask]]] | None = None  # per row: items found before the forward
        self._deferred: dict[int, tuple[list[DeferredMask], int]] = {}  # row -> (masks, sequence)

    @classmethod
    def for_generation(cls, monitors: Sequence[Monitor], vocab: ByteVocabulary, prompts: Sequence[str],
                       defer: bool = False, overlap: bool = True) -> MonitorStage:
        """The stage for one ``constrained_generate`` call (the monitors' servers are shared, not owned).

        ``defer``: put deferred masks off until :meth:`recheck` — only for a loop whose every step goes
        through :meth:`~codemask.decoding.pipeline.Pipeline.process` with a selector that choosing
        again keeps exact (greedy; sampling without top-k/top-p, whose cut would come before the mask).
        Where the grammar and the server disagree so that the step's masks together would leave a row
        no token, the up-front path drops them all and the deferred one keeps those that fit.
        ``overlap``: run the monitors in a worker thread during the forward pass (see the class).
        """
        return cls(MonitorSet(monitors, vocab), prompts, overlap=overlap, defer=defer)

    def record(self, sequence: int, stats: GenerationStats) -> None:
        """The sequence's monitor costs are its stats' ``monitors`` section."""
        stats.monitors = self.usage[sequence]

    def admit(self, rows: Sequence[Row]) -> None:
        """Each row is monitored with its prompt's text (``extra["prompt_text"]``) as the file before
        the cursor, unless the monitors were given a prefix."""
        for row in rows:
            self.prompts.append(str(row.extra.get("prompt_text", "")))
            self.generated.append([])
            self.usage.append(MonitorStats())

    def retire(self, sequences: Sequence[int]) -> None:
        self.prompts = without(self.prompts, sequences)
        self.generated = without(self.generated, sequences)
        self.usage = without(self.usage, sequences)

    def prepare(self, layout: StepLayout) -> None:
        """With ``overlap``, start the step's monitors in the worker; without, compute what needs no
        server now and send the requests the rest need, answered while the forward pass runs."""
        self._pending_layout = layout
        if self._pool is not None:
            self._pending = self._pool.submit(self._compute, layout)
        else:
            self._ahead = [self.monitors.items_ahead(self.prompts[seq], text, self.usage[seq])
                           for seq, text in self._texts(layout)]

    def apply(self, logits: torch.Tensor, layout: StepLayout) -> None:
        """Mask the rows; deferred masks wait for :meth:`recheck` on the step :meth:`prepare` announced
        (a selector's lookahead applies the stage to states nobody rechecks: resolved at once there)."""
        waited = time.perf_counter()
        self._deferred = {}  # only this step's: recheck follows this apply (defer excludes nested applies)
        prepared = self._pending_layout is layout
        if prepared and self._pending is not None:
            found = self._pending.result()
        else:
            found = self._compute(layout, self._ahead if prepared else None)
        self._pending = self._pending_layout = self._ahead = None
        prepared = prepared and self.defer
        if prepared:
            self._deferred = {r: (step.deferred, layout.sequences[r]) for r, step in enumerate(found) if step.deferred}
        masks = [step.mask if prepared else step.resolved() for step in found]
        rows = [r for r, m in enumerate(masks) if m is not None]
        if rows:
            apply_unless_empty(logits, rows, [m for m in masks if m is not None], self.monitors.width)
        spent = time.perf_counter() - waited
        for seq in set(layout.sequences):
            self.usage[seq].wait_s += spent

    def recheck(self, logits: torch.Tensor, layout: StepLayout, chosen: torch.Tensor) -> list[int]:
        """Resolve the deferred masks whose scope holds a row's chosen token and mask the row; the
        rows whose choice that forbids (the rest of the row's deferred masks wait for its next choice)."""
        if not self._deferred:
            return []
        waited = time.perf_counter()
        redo: list[int] = []
        tokens = chosen.tolist()
        for row, (deferred, seq) in list(self._deferred.items()):
            token = int(tokens[row])
            due = [d for d in deferred if token < len(d.scope) and d.scope[token]]
            if not due:
                continue
            left = [d for d in deferred if all(d is not e for e in due)]
            if left:
                self._deferred[row] = (left, seq)
            else:
                del self._deferred[row]
            mask = _and_all(d.resolve() for d in due)
            if mask is not None:
                apply_unless_empty(logits, [row], [mask], self.monitors.width)
                if not bool(torch.isfinite(logits[row, token])):
                    redo.append(row)
            self.usage[seq].wait_s += time.perf_counter() - waited
            waited = time.perf_counter()
        return redo

    def _compute(self, layout: StepLayout, ahead: list[dict[int, list[StepMask]]] | None = None) -> list[StepMasks]:
        return [self.monitors.step_masks(self.prompts[seq], text, self.usage[seq],
                                         None if ahead is None else ahead[row])
                for row, (seq, text) in enumerate(self._texts(layout))]

    def _texts(self, layout: StepLayout) -> list[tuple[int, str]]:
        """Each row's sequence and its generated text (with the drafted tokens before the row's position)."""
        out: list[tuple[int, str]] = []
        for seq, offset in zip(layout.sequences, layout.offsets, strict=True):
            data = b"".join(self.generated[seq])
            if offset:
                data += b"".join(self.token_bytes[t] for t in layout.drafts[seq][:offset])
            out.append((seq, decode_text(data)))
        return out

    def commit(self, sequence: int, token_ids: Sequence[int]) -> None:
        self.generated[sequence].extend(self.token_bytes[int(t)] for t in token_ids)

    def rollback(self, sequence: int, num_tokens: int) -> None:
        if num_tokens:
            del self.generated[sequence][-num_tokens:]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _and_all(masks: Iterable[np.ndarray | None]) -> np.ndarray | None:
    """The AND of the masks that are not None (None: there are none)."""
    combined: np.ndarray | None = None
    for mask in masks:
        if mask is not None:
            combined = mask if combined is None else np.logical_and(combined, mask)
    return combined


def apply_unless_empty(logits: torch.Tensor, rows: list[int], masks: Sequence[np.ndarray], width: int) -> None:
    """Mask ``logits[rows]`` by the bool ``masks`` (True = allowed) in place, except rows the mask
    would leave without any token. Columns at and past ``width`` (a model's padded outputs) are
    forbidden in a masked row, as :func:`~codemask.engine.bitmask.apply_token_bitmask_` does.

    On the CPU each row is tested and masked in numpy, on a view of the logits: about 0.1 ms for a
    150k vocabulary where packing the mask and masking a copy in torch took about 0.8 ms, on the
    main thread beside nothing else. On an accelerator the packed mask is applied and tested on the
    device (``torch.where``), so that no step waits for a host synchronisation.
    """
    vocab_size = min(width, logits.shape[-1])
    if logits.device.type == "cpu" and logits.dtype in _NUMPY_FLOATS:
        for r, mask in zip(rows, masks, strict=True):
            _mask_row_unless_empty(logits[r].detach().numpy(), mask[:vocab_size])
        return
    words = torch.from_numpy(pack_bool_mask(np.stack(list(masks)))).to(logits.device)
    index = torch.tensor(rows, device=logits.device)
    current = logits.index_select(0, index)
    masked = current.clone()
    apply_token_bitmask_(masked, words, vocab_size=vocab_size)
    keep = torch.isfinite(masked).any(dim=-1, keepdim=True)
    logits.index_copy_(0, index, torch.where(keep, masked, current))


_NUMPY_FLOATS = (torch.float32, torch.float64, torch.float16)


def _mask_row_unless_empty(row: np.ndarray, allowed: np.ndarray) -> None:
    """``row[i] = -inf`` where ``allowed`` is False and past its end, unless no finite logit would be left."""
    if allowed.dtype != np.bool_:
        raise ValueError(f"a monitor mask must be a bool array, got {allowed.dtype}")
    head = row[: len(allowed)]
    if bool((np.isfinite(head) & allowed).any()):
        np.putmask(head, ~allowed, -np.inf)
        row[len(allowed):] = -np.inf
