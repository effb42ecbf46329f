"""Turning what a user passes as ``grammar=`` into a :class:`Grammar`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codemask.errors import GrammarError
from codemask.grammar.builtin import SUFFIXES, available, load_builtin
from codemask.grammar.grammar import Grammar

GrammarSpec = Grammar | str | Path | dict[str, Any] | bool | type
"""Accepted forms: a Grammar, a builtin name (``"json"``), a path to an ``.ebnf``/``.gbnf``/``.lark``
file, EBNF text (anything containing ``::=``), a JSON Schema (a dict or a bool), or a pydantic model
class. Regexes go through ``Grammar.from_regex`` and Lark text through ``Grammar.from_lark``, since a
bare string cannot say which of the two it is."""


def as_grammar(spec: Any) -> Grammar:
    """The :class:`Grammar` that ``spec`` names; a clear error for anything it cannot be."""
    if isinstance(spec, Grammar):
        return spec
    if isinstance(spec, Path):
        return Grammar.from_file(spec)
    if isinstance(spec, str):
        return _from_string(spec)
    if isinstance(spec, (dict, bool)):
        return Grammar.from_json_schema(spec)
    if isinstance(spec, type) and hasattr(spec, "model_json_schema"):
        return Grammar.from_pydantic(spec)
    raise TypeError(f"grammar= takes a Grammar, a builtin name, a grammar file path, EBNF text, a JSON Schema "
                    f"dict or a pydantic model class, not {type(spec).__name__}")


def _from_string(spec: str) -> Grammar:
    if "::=" in spec:
        return Grammar.from_ebnf(spec)
    if spec in available():
        return load_builtin(spec)
    if spec.endswith(SUFFIXES):
        if not Path(spec).is_file():
            raise GrammarError(f"grammar file {spec!r} does not exist")
        return Grammar.from_file(spec)
    raise GrammarError(f"{spec!r} is not a builtin grammar ({', '.join(available())}), a grammar file "
                       f"({'/'.join(SUFFIXES)}) or EBNF text; for a regex use Grammar.from_regex, for Lark "
                       "text Grammar.from_lark")
