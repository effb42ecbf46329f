"""Grammars shipped with codemask, by name (``Grammar.builtin("json")``).

They live in the repository's top-level ``grammars/`` folder as ``<name>.ebnf``, ``.gbnf`` or
``.lark``, shipped as package data (``codemask.shipped``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from codemask.errors import GrammarError
from codemask.grammar.grammar import Grammar
from codemask.shipped import data_dirs

SUFFIXES = (".ebnf", ".gbnf", ".lark")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def grammar_dirs() -> list[Path]:
    """Where builtin grammars are looked for: inside the installed package, then the checkout."""
    return data_dirs("grammars")


def available() -> list[str]:
    """The names of the builtin grammars."""
    return sorted({file.stem for folder in grammar_dirs() for file in folder.iterdir() if file.suffix in SUFFIXES})


@functools.cache
def load_builtin(name: str) -> Grammar:
    """The builtin grammar ``name`` (``"json"``, …); a `GrammarError` lists the names there are."""
    if _NAME.fullmatch(name):
        for folder in grammar_dirs():
            for suffix in SUFFIXES:
                path = folder / f"{name}{suffix}"
                if path.is_file():
                    grammar = Grammar.from_file(path)
                    grammar.builtin_name = name
                    grammar.output = "json" if name == "json" else None
                    return grammar
    names = ", ".join(available()) or "none found"
    raise GrammarError(f"unknown builtin grammar {name!r} (available: {names})")
