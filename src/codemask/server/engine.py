"""The serving engine: one thread that owns the model and steps every request's rows.

Requests become :class:`Job`\\ s (one :class:`~codemask.decoding.row.Row` per sample). Plain ones —
grammar, JSON Schema, regex, code completion, RPG, sampling, all per request — join the shared
*batch lane*: one :class:`~codemask.decoding.loop.DecodingLoop` whose rows are decoded in one forward
pass per step, a request joining between two steps and leaving when it finishes (continuous
batching). A request that needs its own decoding strategy (speculative verification, AdaDec, monitors
over its workspace) gets a *lane* of its own, stepped in turn with the batch lane, so it neither
waits for the batch to empty nor stalls it for its whole length.

The engine thread is the only one that calls the model. The HTTP side talks to it through
:meth:`ServingEngine.submit` and :meth:`ServingEngine.cancel` (thread-safe) and hears back through
each job's event queue, fed with ``call_soon_threadsafe`` on the server's event loop. A job waits when
the batch is full; beyond ``max_queued`` waiting jobs :meth:`ServingEngine.submit` raises
:class:`Overloaded` (HTTP 503). An exception while stepping a lane fails that lane's jobs only.
"""

from __future__ import annotations

import asyncio
import codecs
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from codemask.decoding.loop import DecodingLoop
from codemask.decoding.pipeline import Stage, StepLayout, without
from codemask.decoding.row import Row
from codemask.errors import CodemaskError
from codemask.repetition import RPG
from codemask.server.line_end import LineEnd


class Overloaded(CodemaskError):
    """More requests are waiting than the server queues."""


@dataclass
class Event:
    """What a job hears: ``text`` appended to sample ``index``, or (``done``) that sample's end."""

    index: int
    text: str = ""
    done: bool = False
    row: Row | None = None
    error: str | None = None


@dataclass
class Job:
    """One API request's samples, and how it hears back.

    ``lane`` builds a decoding strategy of the job's own (None: the shared batch lane); ``events``
    is an asyncio queue on ``loop``, the server's event loop.
    """

    rows: list[Row]
    loop: asyncio.AbstractEventLoop
    lane: Callable[[], Lane] | None = None
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancelled: bool = False
    submitted: float = field(default_factory=time.perf_counter)
    streams: list[TextStream] = field(default_factory=list)

    def emit(self, event: Event) -> None:
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)


class TextStream:
    """What a row's client sees as it is written: its text up to the first stop string, holding back
    an end that may be the start of one. The loop reports each step's text before it looks for stop
    strings, and a stop string is cut from the answer; streamed as it came, ``stop: ["\\n"]`` would
    send the newline (and the indentation after it) that the whole answer leaves out."""

    def __init__(self, job: Job, index: int, row: Row) -> None:
        self.job, self.index, self.row = job, index, row
        self.sent = 0  # bytes of the row's text streamed (or held in the decoder)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def __call__(self, _key: int, _tokens: list[int], _text: str) -> None:
        """The loop's ``on_token``: stream what can no longer be cut."""
        text = self._take(self._safe_end())
        if text:
            self.job.emit(Event(self.index, text))

    def rest(self) -> str:
        """The row has finished: the rest of its answer (``row.output``)."""
        return self._take(len(self.row.output), final=True)

    def _take(self, end: int, final: bool = False) -> str:
        chunk = bytes(self.row.text[self.sent:end]) if end > self.sent else b""
        self.sent = max(self.sent, end)
        return self.decoder.decode(chunk, final=final)

    def _safe_end(self) -> int:
        text, stops = self.row.text, self.row.options.stops
        found = [at for at in (text.find(stop) for stop in stops) if at >= 0]
        if found:
            return min(found)
        held = max((k for stop in stops for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0)
        return len(text) - held


class Lane:
    """A decoding loop and how to step it (plain, or a speculative runner around it)."""

    def __init__(self, loop: DecodingLoop, step: Callable[[], list[Row]] | None = None,
                 on_admit: Callable[[Sequence[Row]], None] | None = None) -> None:
        self.loop = loop
        self._step = step or loop.step
        self._on_admit = on_admit

    def admit(self, rows: Sequence[Row]) -> None:
        self.loop.admit(rows)
        if self._on_admit is not None:
            self._on_admit(rows)

    def step(self) -> list[Row]:
        return self._step()

    def close(self) -> None:
        self.loop.pipeline.close()


class StopTokenBan(Stage):
    """vLLM's ``ignore_eos``: rows whose ``extra["ignore_eos"]`` is set never pick a stop token."""

    def __init__(self, stop_token_ids: Iterable[int]) -> None:
        self.stop_token_ids = torch.tensor(sorted(stop_token_ids), dtype=torch.long)
        self.banned: list[bool] = []

    def admit(self, rows: Sequence[Row]) -> None:
        self.banned += [bool(row.extra.get("ignore_eos")) for row in rows]

    def retire(self, sequences: Sequence[int]) -> None:
        self.banned = without(self.banned, sequences)

    def apply(self, logits: torch.Tensor, layout: StepLayout) -> None:
        rows = [r for r, seq in enumerate(layout.sequences) if self.banned[seq]]
        if rows:
            ids = self.stop_token_ids[self.stop_token_ids < logits.shape[-1]].to(logits.device)
            logits[torch.tensor(rows, device=logits.device).unsqueeze(1), ids] = float("-inf")


class ServingEngine:
    """Owns the model; decodes submitted jobs in its own thread until :meth:`close`."""

    def __init__(self, model: Any, tokenizer: Any, model_name: str, *, max_batch: int = 8, max_queued: int = 64,
                 batch_lane: Callable[[], DecodingLoop] | None = None) -> None:
        from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size
        from codemask.generate import decoding_loop

        self.model = model
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_batch = max_batch
        self.max_queued = max_queued
        self.compiler = compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))
        self._new_batch_loop = batch_lane or (lambda: decoding_loop(model, tokenizer, compiler=self.compiler,
                                                                    repetition=RPG()))
        self._batch = self._batch_lane()
        self._own: list[tuple[Lane, Job]] = []
        self._waiting: deque[Job] = deque()
        self._jobs: dict[int, Job] = {}  # id(row) -> its job, for the rows in any lane
        self._cancels: list[Job] = []
        self._wake = threading.Condition()
        self._stopping = False
        self.steps = 0
        self._thread = threading.Thread(target=self._run, name="codemask-engine", daemon=True)
        self._thread.start()

    def _batch_lane(self) -> Lane:
        loop = self._new_batch_loop()
        loop.pipeline.stages += [StopTokenBan(loop.vocab.stop_token_ids), LineEnd(loop.vocab)]
        return Lane(loop)

    # -- the HTTP side -----------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job``; :class:`Overloaded` when ``max_queued`` jobs are already waiting."""
        with self._wake:
            if len(self._waiting) >= self.max_queued:
                raise Overloaded(f"{len(self._waiting)} requests are waiting; try again later")
            self._waiting.append(job)
            self._wake.notify()

    def cancel(self, job: Job) -> None:
        """Stop decoding ``job`` (a client that went away): its rows leave at the next step."""
        with self._wake:
            job.cancelled = True
            self._cancels.append(job)
            self._wake.notify()

    @property
    def load(self) -> dict[str, int]:
        return {"running": len(self._batch.loop.rows) + sum(len(lane.loop.rows) for lane, _ in self._own),
                "waiting": len(self._waiting)}

    def close(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout=30)
        self._batch.close()
        for lane, _ in self._own:
            lane.close()

    # -- the engine thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and not self._busy():
                    self._wake.wait()
                if self._stopping:
                    return
                cancels, self._cancels = self._cancels, []
                admitted = self._take_waiting()
            self._apply_cancels(cancels)
            self._admit(admitted)
            self._step_all()

    def _busy(self) -> bool:
        return bool(self._waiting or self._cancels or self._batch.loop.rows or self._own)

    def _take_waiting(self) -> list[Job]:
        """Jobs that may start now: any that brings its own lane, batch jobs while the batch has room."""
        taken: list[Job] = []
        room = self.max_batch - len(self._batch.loop.rows)
        kept: deque[Job] = deque()
        while self._waiting:
            job = self._waiting.popleft()
            if job.cancelled:
                self._finish_unstarted(job)
            elif job.lane is not None or len(job.rows) <= room:
                taken.append(job)
                room -= 0 if job.lane is not None else len(job.rows)
            else:
                kept.append(job)
        self._waiting = kept
        return taken

    def _admit(self, jobs: list[Job]) -> None:
        for job in jobs:
            for index, row in enumerate(job.rows):
                job.streams.append(TextStream(job, index, row))
                row.options.on_token = job.streams[-1]
            try:
                if job.lane is None:
                    self._batch.admit(job.rows)
                else:
                    lane = job.lane()
                    lane.admit(job.rows)
                    self._own.append((lane, job))
            except Exception as exc:  # a request whose admission fails fails alone
                self._fail(job, exc)
                continue
            for row in job.rows:
                self._jobs[id(row)] = job

    def _apply_cancels(self, jobs: list[Job]) -> None:
        for job in jobs:
            for row in job.rows:
                if row.finish_reason is None:
                    row.finish_reason = "cancelled"

    def _step_all(self) -> None:
        if self._batch.loop.rows:
            try:
                self._finished(self._batch.step())
            except Exception as exc:  # a bug in a step: fail the batch's jobs, start a fresh batch
                for job in {id(self._jobs[id(r)]): self._jobs[id(r)] for r in self._batch.loop.rows}.values():
                    self._fail(job, exc)
                self._batch.close()
                self._batch = self._batch_lane()
        for lane, job in list(self._own):
            try:
                self._finished(lane.step())
            except Exception as exc:
                self._fail(job, exc)
                lane.loop.rows = []
            if not lane.loop.rows:
                lane.close()
                self._own.remove((lane, job))
        self.steps += 1

    def _finished(self, rows: list[Row]) -> None:
        for row in rows:
            job = self._jobs.pop(id(row), None)
            if job is not None:
                index = job.rows.index(row)
                job.emit(Event(index, text=job.streams[index].rest(), done=True, row=row))

    def _fail(self, job: Job, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        for index, row in enumerate(job.rows):
            self._jobs.pop(id(row), None)
            if row.finish_reason is None:
                row.finish_reason = "cancelled"
            job.emit(Event(index, done=True, row=row, error=message))

    def _finish_unstarted(self, job: Job) -> None:
        for index, row in enumerate(job.rows):
            row.finish_reason = "cancelled"
            job.emit(Event(index, done=True, row=row))
