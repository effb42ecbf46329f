"""How alike two definitions' texts are, the way RPG's copied-docstring rule and its benchmark measure it.

A word-level ratio (difflib's: twice the matched words over the words of both), with each definition's
own name blanked out first, so that ``vowels_count3``'s docstring, which names ``vowels_count3``, reads
the same as ``vowels_count2``'s. Words are runs of word characters and single punctuation marks;
whitespace and line breaks do not count, so re-indenting or re-wrapping a text leaves it as alike.
"""

from __future__ import annotations

import difflib
import re

_WORD = re.compile(r"\w+|[^\w\s]")


def words(text: str, own_name: str = "") -> list[str]:
    """``text``'s words and punctuation marks, ``own_name`` (the definition's own name) blanked out."""
    if own_name:
        text = re.sub(rf"\b{re.escape(own_name)}\b", "\0", text)
    return _WORD.findall(text)


def likeness(first: list[str], second: list[str]) -> float:
    """difflib's ratio of two word lists: 1.0 for equal lists, 0.0 for lists with nothing in common."""
    return difflib.SequenceMatcher(None, first, second, autojunk=False).ratio()
