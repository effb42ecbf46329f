"""Call signatures from ``textDocument/signatureHelp``, and the arguments a call already has.

The call monitor needs three facts about the callee: which keyword names it accepts, how many
positional arguments it takes at most, and which parameters a call must give. Servers answer with a
signature label and its parameters' labels, in each language's own syntax and each server's own
habits (pyrefly leaves ``self`` in the label but not in the parameters, ty gives labels as UTF-16
offsets, TypeScript marks optional parameters with ``?``), so the syntax is data: a
:class:`CallSyntax` built from the language's ``[triggers.call]`` table.

Arity is only judged from one signature: with overloads, a call that is too long for one may fit
another, and which one the server means is not said reliably.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallSyntax:
    """How a language writes parameters and arguments (regexes from ``[triggers.call]``).

    ``rest``/``kwargs``: a parameter label that collects extra positional / keyword arguments;
    ``optional``: a parameter label with a default (or TypeScript's ``?``); ``keyword_only``: a
    marker between parameters after which they are keyword-only (Python's bare ``*``);
    ``positional_only``: a marker before which they are positional-only (``/``);
    ``keyword_argument``: an argument written as ``name=value``; ``unpacking``: an argument after
    which the count is unknown (``*xs``, ``**kw``, ``...xs``; also what holds commas the split at
    top-level commas cannot see: a ``lambda a, b:``, TypeScript's ``Map<K, V>``).
    """

    keyword_arguments: bool
    rest: re.Pattern[str]
    kwargs: re.Pattern[str]
    optional: re.Pattern[str]
    keyword_only: re.Pattern[str]
    positional_only: re.Pattern[str]
    keyword_argument: re.Pattern[str]
    unpacking: re.Pattern[str]

    @classmethod
    def from_trigger(cls, trigger: dict[str, Any]) -> CallSyntax:
        never = "(?!)"
        return cls(
            keyword_arguments=bool(trigger.get("keyword_arguments", False)),
            rest=re.compile(trigger.get("rest", never)),
            kwargs=re.compile(trigger.get("kwargs", never)),
            optional=re.compile(trigger.get("optional", never)),
            keyword_only=re.compile(trigger.get("keyword_only", never)),
            positional_only=re.compile(trigger.get("positional_only", never)),
            keyword_argument=re.compile(trigger.get("keyword_argument", never)),
            unpacking=re.compile(trigger.get("unpacking", never)),
        )


@dataclass(frozen=True)
class Parameter:
    """One parameter: its name, whether a positional / a keyword argument can give it, and whether
    a call must give it."""

    name: str
    positional: bool
    keyword: bool
    required: bool


@dataclass(frozen=True)
class CallShape:
    """What a callee accepts. ``keywords`` None: it takes ``**kwargs`` (any name goes);
    ``max_positional`` None: it takes ``*args``; ``parameters`` is None unless the server gave exactly
    one signature (arity is judged only then)."""

    keywords: tuple[str, ...] | None
    max_positional: int | None
    parameters: tuple[Parameter, ...] | None


_NAME = re.compile(r"[^\W\d][\w$]*|\$[\w$]*")


def call_shape(result: Any, syntax: CallSyntax) -> CallShape | None:
    """The :class:`CallShape` of a ``SignatureHelp`` result (None when it has no signature)."""
    if not isinstance(result, dict) or not result.get("signatures"):
        return None
    signatures = [_parameters(s, syntax) for s in result["signatures"]]
    keywords: set[str] | None = set()
    for parameters, kwargs in signatures:
        if kwargs or keywords is None:
            keywords = None
        else:
            keywords.update(p.name for p in parameters if p.keyword)
    if len(signatures) != 1:
        return CallShape(_sorted(keywords), None, None)
    parameters, _ = signatures[0]
    rest = any(p.positional and not p.name for p in parameters)
    named = tuple(p for p in parameters if p.name)
    limit = None if rest else sum(p.positional for p in named)
    return CallShape(_sorted(keywords), limit, named)


def _sorted(names: set[str] | None) -> tuple[str, ...] | None:
    return None if names is None else tuple(sorted(names))


def _parameters(signature: dict[str, Any], syntax: CallSyntax) -> tuple[list[Parameter], bool]:
    """A signature's parameters (a ``*args`` one as a nameless positional) and whether it takes ``**kwargs``.

    Markers (``*``, ``/``) are found in the label between parameters, or as parameters of their own.
    """
    label = signature.get("label", "")
    spans = _label_spans(label, signature.get("parameters") or [])
    out: list[Parameter] = []
    keyword_only, kwargs, previous_end = False, False, 0
    for start, end in spans:
        text = label[start:end].strip()
        gap = label[previous_end:start]
        previous_end = end
        if syntax.keyword_only.search(gap) or text == "*":
            keyword_only = True
        if syntax.positional_only.search(gap) or text == "/":
            out = [Parameter(p.name, p.positional, False, p.required) for p in out]
            if text == "/":
                continue
        if text == "*":
            continue
        if syntax.kwargs.match(text):
            kwargs = True
        elif syntax.rest.match(text):
            out.append(Parameter("", True, False, False))
            keyword_only = True
        else:
            match = _NAME.match(text)
            if match is None:
                continue
            out.append(Parameter(match.group(), not keyword_only, syntax.keyword_arguments,
                                 syntax.optional.search(text) is None))
    return out, kwargs


def _label_spans(label: str, parameters: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Each parameter's (start, end) in the signature label: offsets given in UTF-16 units are
    converted, string labels are found left to right."""
    spans: list[tuple[int, int]] = []
    cursor = 0
    units = label.encode("utf-16-le")
    for parameter in parameters:
        given = parameter.get("label", "")
        if isinstance(given, list) and len(given) == 2:
            start = len(units[: 2 * int(given[0])].decode("utf-16-le", errors="replace"))
            end = len(units[: 2 * int(given[1])].decode("utf-16-le", errors="replace"))
        else:
            text = str(given)
            found = label.find(text, cursor)
            if found < 0:  # a label the signature does not spell: keep it apart from the gaps
                spans.append((cursor, cursor))
                continue
            start, end = found, found + len(text)
        spans.append((start, end))
        cursor = end
    return spans


@dataclass(frozen=True)
class Arguments:
    """The arguments a call has so far: how many positional ones are complete, the keyword names
    given, whether the one being written is positional, and whether an unpacking makes the count
    unknown."""

    positional: int
    keywords: frozenset[str]
    current: str
    current_positional: bool
    unknown: bool


def read_arguments(parts: list[str], syntax: CallSyntax) -> Arguments:
    """Classify a call's top-level arguments (the last one is the one being written)."""
    done, current = parts[:-1], parts[-1] if parts else ""
    positional, keywords, unknown = 0, set(), False
    for part in done:
        keyword = syntax.keyword_argument.match(part)
        if syntax.unpacking.match(part):
            unknown = True
        elif keyword:
            keywords.add(keyword.group("name"))
        elif part.strip():
            positional += 1
    keyword = syntax.keyword_argument.match(current)
    if keyword:
        keywords.add(keyword.group("name"))
    unknown = unknown or bool(syntax.unpacking.match(current))
    current_positional = bool(current.strip()) and keyword is None and not unknown
    return Arguments(positional, frozenset(keywords), current, current_positional, unknown)


def missing_required(shape: CallShape, arguments: Arguments) -> bool:
    """Whether a parameter the call must give is given neither by position nor by name."""
    if shape.parameters is None or arguments.unknown:
        return False
    filled = arguments.positional + arguments.current_positional
    positional_index = 0
    for parameter in shape.parameters:
        by_position = parameter.positional and positional_index < filled
        positional_index += parameter.positional
        if parameter.required and not by_position and parameter.name not in arguments.keywords:
            return True
    return False


def open_keywords(shape: CallShape, arguments: Arguments, count_current: bool) -> tuple[str, ...] | None:
    """Keyword names an argument could still use: not given yet by name, nor by position (counting
    the argument being written when ``count_current``); None: any, the callee takes ``**kwargs``."""
    if shape.keywords is None:
        return None
    if shape.parameters is None or arguments.unknown:
        return shape.keywords
    filled = arguments.positional + (count_current and arguments.current_positional)
    out, positional_index = [], 0
    for parameter in shape.parameters:
        by_position = parameter.positional and positional_index < filled
        positional_index += parameter.positional
        if parameter.keyword and not by_position and parameter.name not in arguments.keywords:
            out.append(parameter.name)
    return tuple(out)


def positional_full(shape: CallShape, arguments: Arguments, count_current: bool) -> bool:
    """Whether the positional parameters are all taken (counting the argument being written when
    ``count_current``): another positional argument would be one too many."""
    if shape.max_positional is None or shape.parameters is None or arguments.unknown:
        return False
    return arguments.positional + (count_current and arguments.current_positional) >= shape.max_positional
