"""The HTTP API of ``codemask serve``: OpenAI-style completions and chat, llama.cpp-style ``/infill``.

Each request becomes a job of the :class:`~codemask.server.engine.ServingEngine`; its text comes
back whole, or streamed as server-sent events (``data: {...}`` chunks whose texts add up to the
output, then ``data: [DONE]``). A client that disconnects cancels its job at the engine's next step.
Errors are JSON ``{"error": {"message", "type"}}``: 400 for a bad request (a grammar that does not
parse names its line and column), 503 when the queue is full.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from codemask.decoding.row import Row
from codemask.server.engine import Event, Job, Overloaded, ServingEngine
from codemask.server.jobs import BadRequest, chat_job, completion_job, infill_job
from codemask.server.protocol import ChatRequest, CompletionRequest, InfillRequest

FINISH = {"grammar_end": "stop", "stop": "stop", "length": "length", "cancelled": "abort"}


def create_app(engine: ServingEngine) -> FastAPI:
    """The ASGI app serving ``engine``'s model."""
    app = FastAPI(title="codemask", version=_version())

    @app.exception_handler(BadRequest)
    async def bad_request(_request: Request, exc: BadRequest) -> JSONResponse:
        return _error(400, str(exc), "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors())
        return _error(400, details, "invalid_request_error")

    @app.exception_handler(Overloaded)
    async def overloaded(_request: Request, exc: Overloaded) -> JSONResponse:
        return _error(503, str(exc), "overloaded")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": engine.model_name, **engine.load}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": engine.model_name, "object": "model", "created": 0,
                                             "owned_by": "codemask"}]}

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Any:
        job = completion_job(engine, body, asyncio.get_running_loop())
        return await _answer(engine, job, request, body.stream, _CompletionShape(engine.model_name))

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest, request: Request) -> Any:
        job = chat_job(engine, body, asyncio.get_running_loop())
        return await _answer(engine, job, request, body.stream, _ChatShape(engine.model_name, bool(body.tools)))

    @app.post("/infill", response_model=None)
    async def infill(body: InfillRequest, request: Request) -> Any:
        if body.n_predict == 0:  # llama.vim sends context this way; llama.cpp answers it with nothing
            nothing = {"content": "", "stop": True, "model": engine.model_name, "tokens_predicted": 0,
                       "stop_type": "limit"}
            return StreamingResponse(iter([_sse(nothing)]), media_type="text/event-stream") if body.stream else nothing
        job = infill_job(engine, body, asyncio.get_running_loop())
        return await _answer(engine, job, request, body.stream, _InfillShape(engine.model_name))

    return app


async def _answer(engine: ServingEngine, job: Job, request: Request, stream: bool, shape: _Shape) -> Any:
    engine.submit(job)
    if stream:
        return StreamingResponse(_events(engine, job, shape), media_type="text/event-stream")
    rows = await _collect(engine, job, request)
    errors = [r for r in rows if isinstance(r, str)]
    if errors:
        return _error(500, errors[0], "server_error")
    return shape.whole([r for r in rows if isinstance(r, Row)])


async def _collect(engine: ServingEngine, job: Job, request: Request) -> list[Row | str]:
    """Wait for every sample of ``job``; a client gone meanwhile cancels it."""
    done: dict[int, Row | str] = {}
    while len(done) < len(job.rows):
        try:
            event = await asyncio.wait_for(job.events.get(), timeout=0.5)
        except TimeoutError:
            if await request.is_disconnected():
                engine.cancel(job)
                raise asyncio.CancelledError from None
            continue
        if event.done:
            done[event.index] = event.error if event.error else event.row  # type: ignore[assignment]
    return [done[i] for i in range(len(job.rows))]


async def _events(engine: ServingEngine, job: Job, shape: _Shape) -> AsyncIterator[str]:
    """The job's server-sent events; a client that goes away (the generator is closed) cancels it."""
    finished = 0
    try:
        yield _sse(shape.first())
        while finished < len(job.rows):
            event: Event = await job.events.get()
            if event.error:
                yield _sse({"error": {"message": event.error, "type": "server_error"}})
                finished += 1
                continue
            if event.text:
                yield _sse(shape.delta(event.index, event.text))
            if event.done:
                finished += 1
                assert event.row is not None
                yield _sse(shape.end(event.index, event.row))
        yield "data: [DONE]\n\n"
    finally:
        if finished < len(job.rows):
            engine.cancel(job)


def _sse(chunk: dict[str, Any] | None) -> str:
    return "" if chunk is None else f"data: {json.dumps(chunk)}\n\n"


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def _version() -> str:
    from codemask import __version__

    return __version__


# -- the three response shapes -------------------------------------------------------------------


class _Shape:
    """How one endpoint spells a whole answer and its stream's chunks."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def first(self) -> dict[str, Any] | None:
        return None

    def delta(self, index: int, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def end(self, index: int, row: Row) -> dict[str, Any]:
        raise NotImplementedError

    def whole(self, rows: list[Row]) -> dict[str, Any]:
        raise NotImplementedError

    def usage(self, rows: list[Row]) -> dict[str, int]:
        prompt = rows[0].stats.prompt_tokens if rows else 0
        completion = sum(len(r.token_ids) for r in rows)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _text(row: Row) -> str:
    return row.output.decode("utf-8", errors="replace")


class _CompletionShape(_Shape):
    def _frame(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": choices}

    def delta(self, index: int, text: str) -> dict[str, Any]:
        return self._frame([{"index": index, "text": text, "logprobs": None, "finish_reason": None}])

    def end(self, index: int, row: Row) -> dict[str, Any]:
        return self._frame([{"index": index, "text": "", "logprobs": None,
                             "finish_reason": FINISH[row.finish_reason or "stop"]}])

    def whole(self, rows: list[Row]) -> dict[str, Any]:
        choices = [{"index": i, "text": _text(r), "logprobs": None, "finish_reason": FINISH[r.finish_reason or "stop"]}
                   for i, r in enumerate(rows)]
        return {**self._frame(choices), "usage": self.usage(rows)}


class _ChatShape(_Shape):
    def __init__(self, model: str, tools: bool) -> None:
        super().__init__(model)
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.tools = tools

    def _frame(self, choices: list[dict[str, Any]], kind: str = "chat.completion.chunk") -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}

    def first(self) -> dict[str, Any]:
        return self._frame([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])

    def delta(self, index: int, text: str) -> dict[str, Any]:
        return self._frame([{"index": index, "delta": {"content": text}, "finish_reason": None}])

    def end(self, index: int, row: Row) -> dict[str, Any]:
        _, calls = split_tool_calls(_text(row)) if self.tools else ("", [])
        delta: dict[str, Any] = {"tool_calls": [{**c, "index": k} for k, c in enumerate(calls)]} if calls else {}
        reason = "tool_calls" if calls else FINISH[row.finish_reason or "stop"]
        return self._frame([{"index": index, "delta": delta, "finish_reason": reason}])

    def whole(self, rows: list[Row]) -> dict[str, Any]:
        choices = []
        for index, row in enumerate(rows):
            content, calls = split_tool_calls(_text(row)) if self.tools else (_text(row), [])
            message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
            if calls:
                message["tool_calls"] = calls
            reason = "tool_calls" if calls else FINISH[row.finish_reason or "stop"]
            choices.append({"index": index, "message": message, "finish_reason": reason})
        return {**self._frame(choices, "chat.completion"), "usage": self.usage(rows)}


class _InfillShape(_Shape):
    def delta(self, index: int, text: str) -> dict[str, Any]:
        return {"content": text, "stop": False, "index": index}

    def end(self, index: int, row: Row) -> dict[str, Any]:
        return {"content": "", "stop": True, "index": index, **self._tail(row)}

    def whole(self, rows: list[Row]) -> dict[str, Any]:
        row = rows[0]
        return {"content": _text(row), "stop": True, "model": self.model, **self._tail(row)}

    @staticmethod
    def _tail(row: Row) -> dict[str, Any]:
        stop_type = {"grammar_end": "eos", "stop": "word" if row.stop_at is not None else "eos",
                     "length": "limit", "cancelled": "none"}[row.finish_reason or "stop"]
        return {"tokens_predicted": len(row.token_ids), "tokens_evaluated": row.stats.prompt_tokens,
                "stop_type": stop_type, "timings": {"predicted_ms": 1000 * row.stats.wall_time_s}}


def split_tool_calls(text: str, begin: str = "<tool_call>",
                     end: str = "</tool_call>") -> tuple[str, list[dict[str, Any]]]:
    """The text outside ``<tool_call>`` blocks and the OpenAI ``tool_calls`` the blocks hold."""
    calls: list[dict[str, Any]] = []
    content: list[str] = []
    rest = text
    while begin in rest:
        before, _, after = rest.partition(begin)
        body, closed, rest = after.partition(end)
        content.append(before)
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            content.append(begin + body + closed)
            continue
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": call.get("name", ""), "arguments": json.dumps(call.get("arguments", {}))}})
    content.append(rest)
    return "".join(content).strip(), calls

