"""Monitors: trigger → query → allowed names → token mask, one decoding step at a time.

A monitor looks at the text before the cursor (the document's text before the generation plus what
was generated so far). When a trigger matches (``obj.``, ``from m import``, an argument position in
a call) it asks the language server — once per trigger position: the answer is cached while the
model types the name — turns the answer into names, and the names into a token mask
(:mod:`codemask.monitors.masks`). A server that is down, starting or too slow costs that step its
constraint and nothing else (the monitor counts a timeout).

All monitors of one file share a :class:`WorkspaceFile`: its server (one process per workspace,
:func:`~codemask.monitors.lsp.server_for`), its URI, and the text after the cursor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from codemask.monitors.calls import (
    Arguments,
    CallShape,
    CallSyntax,
    call_shape,
    missing_required,
    open_keywords,
    positional_full,
    read_arguments,
)
from codemask.monitors.lsp import LanguageServer, ServerUnavailable
from codemask.monitors.masks import NameMasks
from codemask.monitors.spec import LanguageSpec
from codemask.monitors.text import CodeScanner, strip_snippet

_NAME = re.compile(r"[^\W\d]\w*")
_MEMBER_LEAD = re.compile(r"^\??\.")
_SKIPPED_KINDS = frozenset({14, 15})  # CompletionItemKind Keyword, Snippet: not names
_CACHE_SIZE = 256
_EMPTY_TTL_S = 0.5


@dataclass
class MonitorCounters:
    """What a monitor cost so far: server requests, timeouts among them, and their wall time."""

    queries: int = 0
    timeouts: int = 0
    query_time_s: float = 0.0


@dataclass(frozen=True)
class Answer:
    """A server's names for one trigger position; ``incomplete`` mirrors ``isIncomplete``; ``call``
    is what a signature says about a call's arguments."""

    names: tuple[str, ...]
    incomplete: bool = False
    call: CallShape | None = None


@dataclass(frozen=True)
class DeferredMask:
    """A mask whose server round-trip waits until a token it may forbid is chosen.

    The probe for a merged token (``xs`` then ``.append``) would ask the server at almost every step
    after a name, for tokens the model seldom picks there: 69% of the requests in the monitors
    benchmark (Qwen2.5-Coder, pyrefly; counted ad hoc). ``scope`` (bool over token ids) holds the
    tokens the mask may forbid; ``resolve`` asks and returns the mask (None: no constraint). The decoding stage
    resolves it only when the chosen token is in ``scope`` and then chooses again under it
    (:meth:`codemask.decoding.pipeline.Stage.recheck`); everyone else resolves it at once.
    """

    scope: np.ndarray
    resolve: Callable[[], np.ndarray | None]


StepMask = np.ndarray | DeferredMask


class WorkspaceFile:
    """The file being generated into: its language, server, URI, and the text around the generation.

    ``prefix`` is the document's text before the generated part (None: the prompt is that text,
    the usual completion set-up); ``suffix`` the text after the cursor.
    """

    def __init__(self, language: LanguageSpec, server: LanguageServer, path: Path, prefix: str | None = None,
                 suffix: str = "", timeout_s: float | None = None) -> None:
        self.language = language
        self.server = server
        self.path = path.resolve()
        self.uri = self.path.as_uri()
        self.prefix = prefix
        self.suffix = suffix
        self.timeout_s = server.spec.request_timeout_s if timeout_s is None else timeout_s
        code = language.code
        self.scanner = CodeScanner(code.get("strings", []), code.get("unterminated", []), code.get("comments", []),
                                   code.get("starts", ""))
        self._scan_lock = threading.Lock()
        self._last_scan: tuple[str, tuple[bool, tuple[tuple[str, int, int], ...]]] | None = None

    def scan(self, text: str) -> tuple[bool, tuple[tuple[str, int, int], ...]]:
        """Whether the end of ``text`` is code, and its open brackets (cached for the last text)."""
        with self._scan_lock:
            last = self._last_scan
            if last is not None and last[0] is text:
                return last[1]
            result = self.scanner.scan(text)
            self._last_scan = (text, result)
            return result

    def send_ahead(self, method: str, before_cursor: str, extra: dict[str, Any] | None = None) -> None:
        """Send the request :meth:`request` will make with these arguments now (its answer arrives
        meanwhile); a server that cannot take it is left to :meth:`request` to report."""
        with self.server.request_lock, contextlib.suppress(ServerUnavailable):
            self.server.send_ahead(method, self.uri, before_cursor + self.suffix, len(before_cursor), extra)

    def request(self, method: str, before_cursor: str, extra: dict[str, Any] | None = None,
                temporary: bool = False) -> Any:
        """``method`` with the document equal to ``before_cursor + suffix`` and the cursor between them.

        ``temporary`` undoes the edit afterwards (an exact inverse ``didChange``): a probe that
        inserted text the model has not written must not stay in the server's copy.
        """
        text = before_cursor + self.suffix
        with self.server.request_lock:
            previous = self.server.document(self.uri)
            try:
                return self.server.request_at(method, self.uri, text, len(before_cursor), self.timeout_s, extra)
            finally:
                if temporary and previous is not None:
                    with contextlib.suppress(ServerUnavailable):
                        self.server.sync(self.uri, previous)


class _AnswerPending(Exception):
    """Raised by :meth:`Monitor.ask` in :meth:`Monitor.items_ahead`: the answer is not known yet and
    its request is on its way."""


class Monitor(ABC):
    """One kind of static check: where it triggers, what it asks, and the mask it makes of the answer."""

    def __init__(self, file: WorkspaceFile) -> None:
        self.file = file
        self.language = file.language
        self.counters = MonitorCounters()
        self._cache: OrderedDict[tuple[str, str], tuple[Answer | None, float]] = OrderedDict()
        self._ahead = threading.local()  # .active: ask sends its request ahead instead of waiting

    def document_text(self, prompt: str, generated: str) -> str:
        """The text before the cursor: the file's prefix (or the prompt) and the generated text."""
        return (prompt if self.file.prefix is None else self.file.prefix) + generated

    def masks(self, text: str, masks: NameMasks) -> list[np.ndarray]:
        """This step's masks (bool over token ids) for ``text`` before the cursor, deferred ones
        resolved; [] when silent."""
        found = (m.resolve() if isinstance(m, DeferredMask) else m for m in self.step_items(text, masks))
        return [m for m in found if m is not None]

    def step_items(self, text: str, masks: NameMasks) -> list[StepMask]:
        """This step's masks for ``text`` before the cursor, those worth deferring as
        :class:`DeferredMask`; [] when silent."""
        in_code, brackets = self.file.scan(text)
        if not in_code:
            return []
        return self.step_masks(text, brackets, masks)

    def items_ahead(self, text: str, masks: NameMasks) -> list[StepMask] | None:
        """:meth:`step_items` if they need no server request; else None, and the request is sent so
        that its answer arrives while the caller does other work.

        The decoding stage calls this before the model's forward pass and :meth:`step_items` after
        it, where the request finds its answer waiting: on a CPU the server's round-trip then
        overlaps the forward pass with no worker thread taking the GIL from it.
        """
        self._ahead.active = True
        try:
            return self.step_items(text, masks)
        except _AnswerPending:
            return None
        finally:
            self._ahead.active = False

    @abstractmethod
    def step_masks(self, text: str, brackets: tuple[tuple[str, int, int], ...], masks: NameMasks) -> list[StepMask]:
        """Masks for a text whose end is code; ``brackets`` are its unclosed brackets."""

    def ask(self, method: str, anchor: str, typed: str, parse: Any, extra: dict[str, Any] | None = None,
            temporary: bool = False) -> Answer | None:
        """The answer at ``anchor`` (the text before the name), cached per position.

        Complete answers are reused while the name is typed; an ``isIncomplete`` one is asked again
        with the typed part. An empty answer is reused for ``_EMPTY_TTL_S`` only: a server still
        loading the project (tsserver after ``didOpen``) answers nothing at first. None when the
        server cannot answer (a timeout is counted).
        """
        key = (anchor, "")
        if key in self._cache:
            cached, when = self._cache[key]
            fresh = cached is None or cached.names or time.monotonic() - when < _EMPTY_TTL_S
            if fresh and (cached is None or not cached.incomplete or not typed):
                self._cache.move_to_end(key)
                return cached
            if cached is not None and cached.incomplete and typed:
                key = (anchor, typed)
        if getattr(self._ahead, "active", False):
            if not temporary:  # a temporary edit would have to be undone before the answer is read
                self.file.send_ahead(method, anchor + typed if key[1] else anchor, extra)
            raise _AnswerPending
        started = time.perf_counter()
        self.counters.queries += 1
        try:
            result = self.file.request(method, anchor + typed if key[1] else anchor, extra, temporary)
        except ServerUnavailable:
            self.counters.timeouts += 1
            return None
        finally:
            self.counters.query_time_s += time.perf_counter() - started
        answer = parse(result)
        if answer is not None and answer.incomplete and self.file.server.spec.complete_lists:
            answer = dataclasses.replace(answer, incomplete=False)
        self._cache[key] = (answer, time.monotonic())
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return answer


def completion_names(result: Any, skip_kinds: frozenset[int] = _SKIPPED_KINDS) -> Answer | None:
    """Names from a ``textDocument/completion`` result (list or ``CompletionList``).

    The name is what the item inserts (``textEdit.newText``, else ``insertText``, else ``label``),
    snippet syntax and a re-inserted leading ``.``/``?.`` removed (typescript-language-server replaces
    the dot), cut at its first non-identifier character (``append(`` → ``append``). Items of a
    ``CompletionItemKind`` in ``skip_kinds`` are not names here (keywords and snippets never are; a
    trigger may drop more, like functions after ``new``).
    """
    if result is None:
        return None
    items = result.get("items", []) if isinstance(result, dict) else result
    incomplete = bool(result.get("isIncomplete")) if isinstance(result, dict) else False
    names: set[str] = set()
    for item in items:
        if item.get("kind") in skip_kinds:
            continue
        edit = item.get("textEdit") or {}
        text = edit.get("newText") or item.get("insertText") or item.get("label") or ""
        if item.get("insertTextFormat") == 2:
            text = strip_snippet(text)
        match = _NAME.match(_MEMBER_LEAD.sub("", text))  # an edit that re-inserts the dot: ".capacity"
        if match:
            names.add(match.group())
    return Answer(tuple(sorted(names)), incomplete)


class _NameMonitor(Monitor):
    """A monitor for a name after a trigger (``.``, ``import``), with a probe for merged tokens.

    ``at`` matches the text before the cursor when a name is being typed (group ``partial``; the
    server is asked at the start of group ``ask`` if there is one, else where the name starts);
    once the trigger is typed, every token must go on with a name except those starting with a
    ``free_first`` character;
    ``probe`` matches text where the next token may bring the trigger and the name at once
    (``.append``), answered by asking with ``probe_insert`` appended as a temporary edit.
    ``exclude_kinds`` (CompletionItemKind numbers) are dropped from the answers; where
    ``value_pattern`` matches the text before the trigger (a ``case`` pattern), ``value_exclude_kinds``
    are dropped too (a pattern names a value, never calls a method). ``suffix``: the trigger
    answers only when the text after the cursor matches it (TypeScript's ``import { ▯ } from "m"``).
    """

    trigger_name: str
    probe_after_keyword = False  # a probe text that is a keyword (`return`) is no expression

    def __init__(self, file: WorkspaceFile) -> None:
        super().__init__(file)
        trigger: dict[str, Any] = self.language.triggers[self.trigger_name]
        skipped = _SKIPPED_KINDS | frozenset(trigger.get("exclude_kinds", ()))
        self._parse = functools.partial(completion_names, skip_kinds=skipped)
        self._parse_value = functools.partial(
            completion_names, skip_kinds=skipped | frozenset(trigger.get("value_exclude_kinds", ())))
        self._value = re.compile(trigger["value_pattern"]) if trigger.get("value_pattern") else None
        self._suffix = re.compile(trigger["suffix"]) if trigger.get("suffix") else None
        self._at = re.compile(trigger["at"])
        self._probe = re.compile(trigger["probe"]) if trigger.get("probe") else None
        self._probe_insert = trigger.get("probe_insert", "")
        self._no_probe = re.compile(trigger["no_probe_after"]) if trigger.get("no_probe_after") else None
        self._free = trigger.get("free_first", "").encode("utf-8")

    def step_masks(self, text: str, brackets: tuple[tuple[str, int, int], ...], masks: NameMasks) -> list[StepMask]:
        if self._suffix is not None and not self._suffix.match(self.file.suffix):
            return []  # the answer depends on text after the cursor that is not written yet
        tail = text[-512:]
        out: list[StepMask] = []
        typed_is_name = True
        at = self._at.search(tail)
        if at is not None:
            typed = at.group("partial") or ""
            ask_at = len(text) - len(tail) + at.start("ask") if "ask" in self._at.groupindex else len(text) - len(typed)
            answer = self.ask("textDocument/completion", text[:ask_at], text[ask_at:], self._parser(tail))
            if answer is not None and answer.names:
                names = _not_listed(answer.names, at.group("ask") if "ask" in self._at.groupindex else "")
                mask = masks.allowed(names, typed.encode("utf-8"), free=self._free)
                typed_is_name = not typed or typed in answer.names  # `{ a,` + ` b`: probe after a comma
                if mask is not None:
                    out.append(mask)
        if typed_is_name and self._probes(tail):
            lead = self._probe_insert.encode("utf-8")
            out.append(DeferredMask(masks.lead_scope(lead),
                                    functools.partial(self._probe_mask, text, self._parser(tail), masks, lead)))
        return out

    def _probe_mask(self, text: str, parse: Any, masks: NameMasks, lead: bytes) -> np.ndarray | None:
        """The probe's mask: ask with the probe text appended (a temporary edit)."""
        probe = self.ask("textDocument/completion", text + self._probe_insert, "", parse, temporary=True)
        if probe is None or not probe.names:
            return None
        return masks.allowed(probe.names, b"", lead)

    def _parser(self, tail: str) -> Any:
        """How to read the answer here: in a value pattern (``case Color.``) without callables."""
        return self._parse_value if self._value is not None and self._value.search(tail) else self._parse

    def _probes(self, tail: str) -> bool:
        match = self._probe.search(tail) if self._probe is not None else None
        if match is None or (not self.probe_after_keyword and match.group() in self.language.keywords):
            return False
        return self._no_probe is None or self._no_probe.search(tail) is None


def _not_listed(names: tuple[str, ...], listed: str) -> list[str]:
    """``names`` without those already in the list typed since the server was asked (``from m import
    a, ▯``: not ``a`` again; TypeScript refuses a duplicate import)."""
    taken = set(_NAME.findall(listed))
    return [n for n in names if n not in taken]


class MemberAccessMonitor(_NameMonitor):
    """After ``obj.`` (or before a token like ``.append``) only members the server knows of ``obj``.

    Enum members are members (``Color.RED``, TypeScript's ``Color.Red``); in a ``case`` pattern
    (``case Color.▯``) methods and functions are dropped: a value pattern cannot call one.
    """

    trigger_name = "member"


class ConstructorMonitor(_NameMonitor):
    """After ``new`` only names the server lists that may be constructed.

    typescript-language-server reports imported names (aliases) and the library's classes (declared
    as ``var Map: MapConstructor``) as Variables, so a Class kind alone would refuse ``new Map()``:
    the trigger's ``exclude_kinds`` drops what certainly is no constructor (functions, methods,
    enums, interfaces, constants, keywords) and keeps the rest.
    """

    trigger_name = "constructor"
    probe_after_keyword = True  # the probe text is `new` itself


class ImportNameMonitor(_NameMonitor):
    """After ``from module import`` only names the server finds in ``module``.

    A server that cannot resolve the module may answer with the builtins instead (pyrefly does);
    an answer holding one of the trigger's ``unresolved`` names is taken as no answer.
    """

    trigger_name = "import"

    def __init__(self, file: WorkspaceFile) -> None:
        super().__init__(file)
        self._unresolved = frozenset(self.language.triggers[self.trigger_name].get("unresolved", ()))

    def ask(self, method: str, anchor: str, typed: str, parse: Any, extra: dict[str, Any] | None = None,
            temporary: bool = False) -> Answer | None:
        answer = super().ask(method, anchor, typed, parse, extra, temporary)
        if answer is not None and self._unresolved.intersection(answer.names):
            return None
        return answer


class CallArgumentMonitor(Monitor):
    """Inside a call's argument list: keyword names the callee has, and its arity.

    Asks ``textDocument/signatureHelp`` once per call (right after its ``(``) and reads the
    arguments written so far (top-level commas, strings and brackets skipped). Masks:

    - ``name=`` only for keyword parameters not given yet (nothing when it takes ``**kwargs``);
    - with one signature and no unpacking among the arguments: a ``,`` is forbidden once the
      positional parameters are all taken and no keyword parameter is left (it could only start an
      argument too many), an argument after them must be ``name=`` for a keyword parameter left
      (or ``)``; whitespace until the argument holds a newline),
      and ``)`` is forbidden while a required parameter is given neither by position nor by name.

    A callee whose signature the server does not know leaves the arguments alone.
    """

    def __init__(self, file: WorkspaceFile) -> None:
        super().__init__(file)
        trigger = self.language.triggers["call"]
        self._callee = re.compile(trigger["callee"])
        self._not_callee = re.compile(trigger["not_callee"])
        self._argument = re.compile(trigger["argument"])
        self._syntax = CallSyntax.from_trigger(trigger)
        self._parse = functools.partial(signature_answer, syntax=self._syntax)

    def step_masks(self, text: str, brackets: tuple[tuple[str, int, int], ...], masks: NameMasks) -> list[StepMask]:
        if not brackets or brackets[-1][0] != "(":
            return []
        opened = brackets[-1][1]
        before = text[max(0, opened - 256):opened]
        callee = self._callee.search(before)
        if callee is None or callee.group().strip() in self.language.keywords or self._not_callee.search(before):
            return []
        answer = self.ask("textDocument/signatureHelp", text[: opened + 1], "", self._parse)
        if answer is None or answer.call is None:
            return []
        arguments = read_arguments(self.file.scanner.arguments(text, opened + 1), self._syntax)
        found = [self._keyword_mask(answer.call, arguments, masks), *self._arity_masks(answer.call, arguments, masks)]
        return [m for m in found if m is not None]

    def _keyword_mask(self, shape: CallShape, arguments: Arguments, masks: NameMasks) -> np.ndarray | None:
        """``word=`` only for a keyword parameter not given yet (the argument may still become one)."""
        if not self._syntax.keyword_arguments:
            return None
        names = open_keywords(shape, arguments, count_current=False)
        argument = self._argument.match(arguments.current)
        if names is None or argument is None:
            return None
        return masks.keywords(names, (argument.group("partial") or "").encode("utf-8"))

    def _arity_masks(self, shape: CallShape, arguments: Arguments, masks: NameMasks) -> list[np.ndarray | None]:
        """The ``,`` / keyword-only / ``)`` masks (see the class docstring). For ``,`` the argument
        being written counts when it is a positional one: the comma would come after it."""
        out: list[np.ndarray | None] = []
        left = open_keywords(shape, arguments, count_current=True)
        if positional_full(shape, arguments, count_current=True) and left is not None and not left:
            out.append(masks.forbid_top_level(","))
        if (self._syntax.keyword_arguments and left is not None
                and positional_full(shape, arguments, count_current=False)
                and not self._syntax.keyword_argument.match(arguments.current)):
            out.append(masks.keyword_argument_only(left, arguments.current.lstrip().encode("utf-8"),
                                                   more_space="\n" not in arguments.current))
        if missing_required(shape, arguments):
            out.append(masks.forbid_top_level(")"))
        return out


def signature_answer(result: Any, syntax: CallSyntax) -> Answer | None:
    """A ``SignatureHelp`` as an :class:`Answer`: its keyword names and its :class:`CallShape`."""
    shape = call_shape(result, syntax)
    if shape is None:
        return None
    return Answer(shape.keywords or (), call=shape)


def keyword_names(result: Any) -> Answer | None:
    """Keyword-parameter names from a ``SignatureHelp``; None when any signature takes ``**kwargs``.

    Parameters before a ``/`` are positional-only and not names a call may use; a bare ``*`` and
    ``*args`` are not names either. Labels given as UTF-16 offsets into the signature are resolved.
    """
    if not isinstance(result, dict) or not result.get("signatures"):
        return None
    names: set[str] = set()
    for signature in result["signatures"]:
        labels = [_parameter_label(signature.get("label", ""), p.get("label", ""))
                  for p in signature.get("parameters") or []]
        if any(label.lstrip().startswith("**") for label in labels):
            return None
        if "/" in [label.strip() for label in labels]:
            labels = labels[[label.strip() for label in labels].index("/") + 1:]
        for label in labels:
            match = _NAME.match(label.strip())
            if match:
                names.add(match.group())
    return Answer(tuple(sorted(names)))


def _parameter_label(signature: str, label: Any) -> str:
    if isinstance(label, list) and len(label) == 2:
        units = signature.encode("utf-16-le")
        return units[2 * int(label[0]): 2 * int(label[1])].decode("utf-16-le", errors="replace")
    return str(label)
