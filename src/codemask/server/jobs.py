"""From an API request to the rows the engine decodes: prompt, grammar, options and decoding strategy.

Everything that can be wrong with a request (a grammar that does not parse, a schema codemask cannot
make exact, a prefix the language's grammar refuses, a workspace that does not exist) is found here,
before the engine sees it, and becomes a :class:`BadRequest` (HTTP 400) with the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from codemask.decoding.row import Row, RowOptions
from codemask.decoding.sampling import SamplingParams
from codemask.errors import CodemaskError
from codemask.grammar.grammar import Grammar
from codemask.server.engine import Job, Lane, ServingEngine
from codemask.server.fim import completion_prompt, fim_format
from codemask.server.protocol import ChatRequest, CodemaskFields, CompletionRequest, InfillRequest

MAX_CHAT_TOKENS = 1024  # a chat request that sets no limit
CONTEXT_BEFORE, CONTEXT_AFTER = 6000, 2000  # characters of the file around a cursor that the model reads
MIN_ECHO = 4  # a suffix line shorter than this (a lone bracket) is too common to cut a completion at


class BadRequest(CodemaskError):
    """A request the server refuses, with the reason (HTTP 400)."""


@dataclass(frozen=True)
class Prompt:
    """What the model is fed (text or chat messages, with the template's ``tools``) and the code
    before and after the cursor that a code grammar continues."""

    fed: str | list[dict[str, Any]]
    code_prefix: str = ""
    code_suffix: str | None = None
    tools: list[dict[str, Any]] | None = None


def completion_job(engine: ServingEngine, request: CompletionRequest, loop: asyncio.AbstractEventLoop) -> Job:
    """``/v1/completions``: the prompt is the code before the cursor; a ``suffix`` makes it FIM. A
    prompt the client already wrote in the model's FIM format is fed as it is, and its two parts are
    the code before and after the cursor for ``language`` and ``until``."""
    form = fim_format(engine.tokenizer)
    parts = form.split(request.text) if form is not None and request.suffix is None else None
    if parts is not None:
        prompt = Prompt(request.text, *parts)
    else:
        fed = completion_prompt(engine.tokenizer, *_window(request.text, request.suffix))
        prompt = Prompt(fed, request.text, request.suffix)
    return _job(engine, request, prompt, _grammar(request, prompt), request.max_tokens or 16, request.stop,
                (request.temperature, request.top_k, request.top_p, request.seed), request.n, loop)


def infill_job(engine: ServingEngine, request: InfillRequest, loop: asyncio.AbstractEventLoop) -> Job:
    """llama.cpp's ``/infill``: prefix, suffix and other files; ``prompt`` is typed text at the cursor."""
    extra = [(f.filename, f.text) for f in request.input_extra]
    if fim_format(engine.tokenizer) is not None:  # the text typed on the cursor's line opens the middle
        head, tail = _window(request.input_prefix, request.input_suffix)
        fed = completion_prompt(engine.tokenizer, head, tail, extra) + request.prompt
    else:
        fed = completion_prompt(engine.tokenizer, *_window(request.input_prefix + request.prompt, None), extra)
    prompt = Prompt(fed, request.input_prefix + request.prompt, request.input_suffix)
    return _job(engine, request, prompt, _grammar(request, prompt), request.n_predict, request.stop or None,
                (request.temperature, request.top_k, request.top_p, request.seed), 1, loop)


def chat_job(engine: ServingEngine, request: ChatRequest, loop: asyncio.AbstractEventLoop) -> Job:
    """``/v1/chat/completions``: messages through the chat template; ``response_format`` and ``tools``
    become the grammar (a request's own grammar fields apply when it sets neither)."""
    prompt = Prompt(request.messages, tools=request.tools)
    grammar = _chat_grammar(request) or _grammar(request, prompt)
    limit = request.max_completion_tokens or request.max_tokens or MAX_CHAT_TOKENS
    return _job(engine, request, prompt, grammar, limit, request.stop,
                (request.temperature, request.top_k, request.top_p, request.seed), request.n, loop)


# -- the pieces ----------------------------------------------------------------------------------


def _suffix_echo(suffix: str | None) -> list[str]:
    """Where a completion has reached the text after the cursor: a FIM model that writes the next
    line of the suffix (the rest of the cursor's line, or the line after it) instead of ending is
    cut there, as editors trim a completion's overlap with the suffix."""
    if not suffix:
        return []
    for line in suffix.splitlines()[:2]:
        if len(line.strip()) >= MIN_ECHO:
            return [line.rstrip()]
    return []


def _window(prefix: str, suffix: str | None) -> tuple[str, str | None]:
    """The part of the file around the cursor the model reads: the last `CONTEXT_BEFORE` characters
    before it and the first `CONTEXT_AFTER` after it, cut at line starts. A code grammar still gets the
    whole prefix and suffix (it must parse the file); the model needs the neighbourhood."""
    if len(prefix) > CONTEXT_BEFORE:
        cut = prefix.find("\n", len(prefix) - CONTEXT_BEFORE)
        prefix = prefix[cut + 1:] if 0 <= cut < len(prefix) - 1 else prefix[-CONTEXT_BEFORE:]
    if suffix is not None and len(suffix) > CONTEXT_AFTER:
        cut = suffix.rfind("\n", 0, CONTEXT_AFTER)
        suffix = suffix[: cut + 1] if cut > 0 else suffix[:CONTEXT_AFTER]
    return prefix, suffix


def _grammar(fields: CodemaskFields, prompt: Prompt) -> Grammar | None:
    """The grammar a request's codemask fields ask for (at most one of them), or None."""
    given = [name for name in ("grammar", "json_schema", "regex", "language") if getattr(fields, name) is not None]
    if len(given) > 1:
        raise BadRequest(f"give at most one of grammar, json_schema, regex and language, not {', '.join(given)}")
    try:
        if fields.grammar is not None:
            from codemask.grammar.builtin import available
            from codemask.integrations.specs import grammar_from_text

            return Grammar.builtin(fields.grammar) if fields.grammar in available() else \
                grammar_from_text(fields.grammar)
        if fields.json_schema is not None:
            return Grammar.from_json_schema(fields.json_schema)
        if fields.regex is not None:
            return Grammar.from_regex(fields.regex)
        if fields.language is not None:
            return Grammar.builtin(fields.language, until=fields.until, prefix=prompt.code_prefix,
                                   suffix=prompt.code_suffix)
    except (CodemaskError, ValueError) as exc:
        raise BadRequest(str(exc)) from None
    if fields.until not in (None, "line"):
        raise BadRequest(f"until={fields.until!r} needs a language (a code grammar that knows statements)")
    return None


def _chat_grammar(request: ChatRequest) -> Grammar | None:
    from codemask.grammar.structural import tool_call_tags

    form = request.response_format
    try:
        if form is not None and form.type == "json_schema":
            spec = form.json_schema or {}
            schema = spec.get("schema", spec) if isinstance(spec, dict) else spec
            return Grammar.from_json_schema(schema)
        if form is not None and form.type == "json_object":
            return Grammar.from_json_schema({"type": "object", "additionalProperties": True})
        if request.tools and request.tool_choice != "none":
            return _tools_grammar(request.tools, request.tool_choice, tool_call_tags)
    except (CodemaskError, ValueError) as exc:
        raise BadRequest(str(exc)) from None
    return None


def _tools_grammar(tools: list[dict[str, Any]], choice: str | dict[str, Any] | None, tags_of: Any) -> Grammar:
    """Tool calls in free text (``auto``), or a call first (``required``, or one named tool)."""
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        named = [t for t in tools if (t.get("function") or t).get("name") == name]
        if not named:
            raise BadRequest(f"tool_choice names {name!r}, which is not among the tools")
        return Grammar.from_tags(tags_of(named), triggers=["<tool_call>"], at_least_one=True, text_first=False,
                                 stop_after_first=True)
    if choice not in (None, "auto", "required"):
        raise BadRequest(f"tool_choice is 'auto', 'required', 'none' or a named tool, not {choice!r}")
    required = choice == "required"
    return Grammar.from_tags(tags_of(tools), triggers=["<tool_call>"], at_least_one=required, text_first=not required)


def _job(engine: ServingEngine, fields: CodemaskFields, prompt: Prompt, grammar: Grammar | None, max_tokens: int,
         stop: str | Sequence[str] | None, sampling: tuple[float, int, float, int | None], n: int,
         loop: asyncio.AbstractEventLoop) -> Job:
    from codemask.generate import new_row

    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if fields.until == "line" and fields.language is None:
        stops.append("\n")  # a line ends at its newline where no code grammar says more
    stops += _suffix_echo(prompt.code_suffix)
    temperature, top_k, top_p, seed = sampling
    params = SamplingParams(temperature, top_k, top_p)
    fed: Any = prompt.fed
    if prompt.tools is not None and isinstance(fed, list):
        fed = engine.tokenizer.apply_chat_template(fed, tools=prompt.tools, add_generation_prompt=True,
                                                   tokenize=False)
    rows: list[Row] = []
    for index in range(n):
        options = RowOptions(max_tokens, [s.encode("utf-8") for s in stops])
        extra = {"repetition": fields.repetition, "ignore_eos": fields.ignore_eos, "sampling": (params, seed, index),
                 "end_line": fields.until == "line" and fields.language is not None}
        try:
            row = new_row(engine.tokenizer, engine.compiler, fed, grammar, options, **extra)
        except (CodemaskError, ValueError, TypeError) as exc:
            raise BadRequest(str(exc)) from None
        if prompt.code_prefix:
            row.extra["prompt_text"] = prompt.code_prefix
        rows.append(row)
    return Job(rows, loop, lane=_own_lane(engine, fields, prompt, params, seed))


def _own_lane(engine: ServingEngine, fields: CodemaskFields, prompt: Prompt, params: SamplingParams,
              seed: int | None) -> Any:
    """A lane of the request's own for speculative verification, AdaDec or monitors (None: the batch)."""
    if not (fields.speculative or fields.uncertainty or fields.workspace):
        return None
    monitors = _monitors(fields, prompt) if fields.workspace else None

    def build() -> Lane:
        from codemask.adadec import AdaDec
        from codemask.generate import Sampling, _build_loop
        from codemask.repetition import RPG
        from codemask.speculative import SpeculativeRunner, resolve_drafter

        sampling = Sampling(params.temperature, params.top_k, params.top_p, seed)
        loop, sampler, adadec = _build_loop(engine.model, engine.tokenizer, engine.compiler, sampling,
                                            RPG() if fields.repetition else None,
                                            AdaDec() if fields.uncertainty else None, monitors, defer=False)
        if not fields.speculative:
            return Lane(loop)
        runner = SpeculativeRunner(loop, resolve_drafter("auto"), sampler, adadec)  # type: ignore[arg-type]
        return Lane(loop, runner.step, runner.admit)

    return build


def _monitors(fields: CodemaskFields, prompt: Prompt) -> list[Any]:
    from pathlib import Path

    from codemask.monitors import for_workspace

    workspace = Path(fields.workspace or "")
    if not workspace.is_dir():
        raise BadRequest(f"workspace {fields.workspace!r} is not a folder on the server")
    if not fields.path:
        raise BadRequest("monitors need the file's path in the workspace: give path with workspace")
    try:
        return for_workspace(workspace, fields.path, fields.language or "python", prefix=prompt.code_prefix or None,
                             suffix=prompt.code_suffix or "")
    except (CodemaskError, ValueError) as exc:
        raise BadRequest(str(exc)) from None
