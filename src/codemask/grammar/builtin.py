"""Grammars shipped with codemask, by name (``Grammar.builtin("json")``).

They live in the repository's top-level ``grammars/`` folder as ``<name>.ebnf``, ``.gbnf`` or
``.lark``. A wheel carries them inside the package as ``codemask/grammars/`` (``setup.py`` copies
them there at build time); an editable or source checkout reads the top-level folder directly,
so there is one copy of each file and no build step between editing a grammar and using it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from codemask.errors import GrammarError
from codemask.grammar.grammar import Grammar

SUFFIXES = (".ebnf", ".gbnf", ".lark")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def grammar_dirs() -> list[Path]:
    """Where builtin grammars are looked for: inside the installed package, then the checkout."""
    package = Path(__file__).resolve().parents[1]
    checkout = package.parents[1]  # src/codemask -> the repository root, in a source checkout
    candidates = [package / "grammars"]
    if (checkout / "pyproject.toml").is_file():
        candidates.append(checkout / "grammars")
    return [path for path in candidates if path.is_dir()]


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
