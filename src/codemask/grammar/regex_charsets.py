"""Code point sets for the regex front-end, computed by ``re`` itself.

The parser (:mod:`codemask.grammar.regex_syntax`) turns every single-character item of a pattern
into the set of code points it matches, and the converter (:mod:`codemask.grammar.regex`) asks
which of those sets can sit on either side of an anchor. Both need the same sets and the same few
operations on them, so they live here, under neither.

What an item matches (``\\d``, ``\\w``, ``\\s`` with their Unicode or ASCII meanings, and every
literal or class under ``IGNORECASE``, with Python's simple case folding and its special cases like
``ſ``/``K``/``ı``) is computed by running ``re`` itself over a string of every code point, once per
item and cached. So it cannot drift from Python's behaviour, whatever the version. Sets are sorted,
disjoint ranges of code points without the surrogates, which no UTF-8 text holds.
"""

from __future__ import annotations

import functools
import re
from typing import TypeAlias

import numpy as np

from codemask.grammar.ir import MAX_CODE_POINT, complement_ranges, normalize_ranges

Ranges: TypeAlias = tuple[tuple[int, int], ...]

_ASCII = int(re.ASCII)


@functools.cache
def _every_code_point() -> str:
    """Every code point in order, surrogates included (decoded from UTF-32: a tenth of the time of
    joining a million one-character strings, which every first ``\\w`` of a process paid)."""
    return np.arange(MAX_CODE_POINT + 1, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")


def without_surrogates(ranges: Ranges) -> Ranges:
    """Surrogates have no UTF-8 encoding: no byte string can contain one."""
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if lo < 0xD800:
            out.append((lo, min(hi, 0xD7FF)))
        if hi > 0xDFFF:
            out.append((max(lo, 0xE000), hi))
    return tuple(out)


@functools.cache
def scan(one_char_regex: str, flags: int) -> Ranges:
    """The code points that ``one_char_regex`` matches under ``flags``, as ranges.

    ``(?:X)+`` over the string of all code points in order matches each maximal run of
    consecutive members once, so the matches are exactly the ranges.
    """
    compiled = re.compile(f"(?:{one_char_regex})+", flags)
    found = tuple((m.start(), m.end() - 1) for m in compiled.finditer(_every_code_point()))
    return without_surrogates(found)


def category(letter: str, ascii_only: bool) -> Ranges:
    return scan("\\" + letter, _ASCII if ascii_only else 0)


def word_chars(ascii_only: bool) -> Ranges:
    return category("w", ascii_only)


def intersects(a: Ranges, b: Ranges) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False


def union(a: Ranges, b: Ranges) -> Ranges:
    return normalize_ranges(a + b)


def complement(ranges: Ranges) -> Ranges:
    return without_surrogates(complement_ranges(normalize_ranges(ranges)))


EVERYTHING: Ranges = without_surrogates(((0, MAX_CODE_POINT),))
NOT_NEWLINE: Ranges = without_surrogates(((0, 9), (11, MAX_CODE_POINT)))
NEWLINE: Ranges = ((10, 10),)
