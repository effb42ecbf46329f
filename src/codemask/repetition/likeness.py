"""How alike two definitions' texts are, the way RPG's copied-docstring rule and its benchmark measure it.

A word-level ratio (difflib's: twice the matched words over the words of both, over the first
:data:`MAX_WORDS` words of each), with each definition's own name blanked out first, so that
``vowels_count3``'s docstring, which names ``vowels_count3``, reads the same as ``vowels_count2``'s.
Words are runs of word characters and single punctuation marks; whitespace and line breaks do not
count, so re-indenting or re-wrapping a text leaves it as alike.
"""

from __future__ import annotations

import difflib
import re

_WORD = re.compile(r"\w+|[^\w\s]")
MAX_WORDS = 512  # words of each text compared (a bound on the cost; longer docstrings are rare)


def blank_name(text: str, own_name: str) -> str:
    """``text`` with every whole-word occurrence of ``own_name`` (a definition's own name) replaced by NUL."""
    return re.sub(rf"\b{re.escape(own_name)}\b", "\0", text) if own_name else text


def words(text: str, own_name: str = "") -> list[str]:
    """``text``'s words and punctuation marks, ``own_name`` (the definition's own name) blanked out."""
    return _WORD.findall(blank_name(text, own_name))


def likeness(first: list[str], second: list[str]) -> float:
    """difflib's ratio of the first :data:`MAX_WORDS` words of two word lists: 1.0 for equal lists, 0.0 for
    lists with nothing in common. Matching costs about the product of the lengths, more on repetitive text
    (two 240-word doctest blocks take 10 ms, two 480-word ones 80 ms), so the words are capped: RPG measures
    a pair once, and a docstring of more than 512 words is rare."""
    return difflib.SequenceMatcher(None, first[:MAX_WORDS], second[:MAX_WORDS], autojunk=False).ratio()
