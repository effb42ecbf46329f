"""A serving engine's structured-output request, as a codemask :class:`~codemask.grammar.Grammar`.

vLLM and SGLang describe a request by a kind and a string: a JSON Schema, ``json_object``, a regex,
an EBNF/GBNF or Lark grammar, a list of choices, a structural tag. Both integrations go through
:func:`grammar_for`, so a request means the same grammar in either engine, and both reject the same
malformed requests with the same message before any vocabulary is involved.

JSON Schemas compile in codemask's generation mode (``Grammar.from_json_schema(mode="generate")``):
keys at most once and in the schema's order, objects closed unless the schema opens them, bounded
whitespace — what xgrammar's strict mode and OpenAI's structured outputs write.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from codemask.errors import GrammarError
from codemask.grammar.grammar import Grammar

Kind = Literal["json", "json_object", "regex", "grammar", "choice", "structural_tag"]
KINDS: tuple[Kind, ...] = ("json", "json_object", "regex", "grammar", "choice", "structural_tag")

# Any JSON object: with additionalProperties stated, generation mode leaves the object open.
_ANY_OBJECT = {"type": "object", "additionalProperties": True}
_EBNF_RULE = re.compile(r"::=")
_COMMENT = re.compile(r"(#|//).*$")


@dataclass(frozen=True)
class JsonOptions:
    """How JSON requests compile: ``whitespace`` is ``"flexible"`` (bounded) or ``"compact"`` (none)."""

    whitespace: Literal["flexible", "compact"] = "flexible"


def grammar_for(kind: str, spec: str, options: JsonOptions = JsonOptions()) -> Grammar:
    """The grammar of one request: ``kind`` is one of :data:`KINDS`, ``spec`` its text.

    Raises :class:`~codemask.errors.GrammarError` (a ``ValueError``) with the reason when ``spec``
    cannot be compiled: a schema that is not JSON, a grammar with a syntax error, an empty choice.
    """
    if not isinstance(spec, str):
        raise TypeError(f"a {kind} request's specification must be a string, got {type(spec).__name__}")
    if kind == "json":
        return Grammar.from_json_schema(spec, whitespace=options.whitespace)
    if kind == "json_object":
        return Grammar.from_json_schema(_ANY_OBJECT, whitespace=options.whitespace)
    if kind == "regex":
        return Grammar.from_regex(spec)
    if kind == "grammar":
        return grammar_from_text(spec)
    if kind == "choice":
        return choice_grammar(_choices(spec))
    if kind == "structural_tag":
        return structural_tag_grammar(spec)
    raise ValueError(f"unknown structured-output kind {kind!r} (known: {', '.join(KINDS)})")


def grammar_from_text(text: str) -> Grammar:
    """EBNF/GBNF (start rule ``root``) when a line defines a rule with ``::=``, else Lark (start ``start``).

    The same test vLLM applies to tell the two apart, so a grammar means one thing whichever backend
    a server runs.
    """
    if not text.strip():
        raise GrammarError("the grammar is empty")
    for line in text.splitlines():
        if _EBNF_RULE.search(_COMMENT.sub("", line)):
            return Grammar.from_ebnf(text)
    return Grammar.from_lark(text)


def choice_grammar(choices: list[str]) -> Grammar:
    """Exactly one of ``choices``, each a literal string."""
    return Grammar.from_regex("|".join(re.escape(choice) for choice in choices))


def structural_tag_grammar(spec: str) -> Grammar:
    """A structural tag: free text in which a trigger opens a tagged structure whose body follows a
    schema (vLLM's ``{"structures": [...], "triggers": [...]}`` or xgrammar's ``{"type":
    "structural_tag", "format": {...}}``; :meth:`Grammar.from_structural_tag`)."""
    return Grammar.from_structural_tag(_json(spec, "structural tag"))


def _choices(spec: str) -> list[str]:
    choices = _json(spec, "choice list")
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise GrammarError(f"a choice request is a JSON list of strings, got {spec[:200]!r}")
    if not choices:
        raise GrammarError("a choice request needs at least one choice")
    return choices


def _json(spec: str, what: str) -> Any:
    try:
        return json.loads(spec)
    except json.JSONDecodeError as exc:
        raise GrammarError(f"the {what} is not valid JSON: {exc}") from None
