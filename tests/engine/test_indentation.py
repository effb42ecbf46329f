"""Python's indentation inside the engine's state, checked against CPython's tokenizer and parser.

Each text is fed byte by byte to the builtin ``python`` grammar; the verdict must equal
``ast.parse``'s (which runs CPython's tokenizer: NEWLINE/INDENT/DEDENT, brackets, continuations,
tabs). The texts isolate one rule of the tokenizer each.
"""

from __future__ import annotations

import functools

import pytest

from codemask import Grammar
from codemask.engine.indentation import next_column
from codemask.engine.recognizer import Recognizer
from tests.python_harness import parses

CASES = [
    "x = 1\n",
    "x = 1",  # an implicit NEWLINE at the end
    "",
    "# only a comment",
    "\n\n# leading comments\n\nx = 1\n",
    "  x = 1\n",  # the first line must be at column 0
    "\n  \n  x = 1\n",
    "if x:\n    y\nz\n",
    "if x:\n    y\n  z\n",  # a dedent to no outer level
    "if x:\n    y\n        z\n",  # an unexpected indent
    "if x:\ny\n",  # a missing indent
    "if x:\n    y\n\n  # a comment at another column\n\n    z\n",  # blank and comment lines do not count
    "if x:\n\ty\n",
    "if x:\n\ty\n        z\n",  # a tab is 8 columns, but with tab size 1 it is not 8: TabError
    "if x:\n        y\n\tz\n",
    "if x:\n  \ty\n  \tz\n",
    "x = (1,\n2,\n      3)\n",  # no indentation inside brackets
    "x = [\n  1,\n]\nif x:\n    pass\n",
    "x = {1:\n2}\n",
    "x = 1 + \\\n        2\n",  # a continuation line's indentation does not count
    "x = 1 + \\ \n 2\n",  # a backslash must end the line
    "if x:\n    y = (1,\n2)\n    z\n",
    "def f():\n    return 1\n\n\n\nclass A:\n    pass\n",
    "if x:\n    pass\n# trailing comment at column 0\n",
    "if x:\n    pass\n    ",
    "if x:\n    pass\n\f\nz\n",
    "if x: pass\nelse: pass\n",
    "while x:\n    if y:\n        break\n    else:\n        continue\nelse:\n    pass\n",
    "if x:\n    if y:\n        pass\n  else:\n    pass\n",
    "x = (\n",
    "x = 1)\n",
    "print('''a\n  b\nc''')\nif x:\n    pass\n",
]


@functools.cache
def recognizer() -> Recognizer:
    return Recognizer(Grammar.builtin("python"))


@pytest.mark.parametrize("text", CASES)
def test_indentation_agrees_with_cpython(text: str) -> None:
    assert recognizer().accepts(text) == parses(text), text


def test_column_measures_tabs_both_ways() -> None:
    column = next_column(None, ord("\n"))
    assert column == (0, 0)
    for byte in b"  \t ":
        column = next_column(column, byte)
    assert column == (9, 4)
    assert next_column(column, ord("#")) is None
    assert next_column(column, 0x0C) == (0, 0)
