"""Print the terminals ``_ID_START`` and ``_ID_CONTINUE`` of ``grammars/python.lark``: Python's identifier
characters (XID_Start, XID_Continue) as regexes.

Python ``re``'s ``\\w`` is close but not the same: it lacks combining marks (Devanagari, Thai or
Hebrew vowel signs and points), connector punctuation and a few letter-like symbols, and has
numbers such as ``²`` or ``½`` that no identifier may hold. Each terminal is ``\\w`` (or
``[^\\W\\d]``) without the characters it should not have, or a class of the ones it lacks. This
interpreter's ``str.isidentifier`` decides; re-run it and paste its lines into the grammar when
moving to a newer Python (the Unicode version is printed too).

Run: python scripts/identifier_chars.py
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Callable

WORD = re.compile(r"\w")
WORD_START = re.compile(r"[^\W\d]")


def ranges(member: Callable[[str], bool]) -> list[tuple[int, int]]:
    """The code points (surrogates excepted) for which ``member`` holds, as inclusive ranges."""
    out: list[tuple[int, int]] = []
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF or not member(chr(cp)):
            continue
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def escape(cp: int) -> str:
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def char_class(found: list[tuple[int, int]]) -> str:
    return "[" + "".join(escape(a) if a == b else f"{escape(a)}-{escape(b)}" for a, b in found) + "]"


def main() -> None:
    start_more = ranges(lambda c: c.isidentifier() and not WORD_START.match(c))
    start_less = ranges(lambda c: bool(WORD_START.match(c)) and not c.isidentifier())
    more = ranges(lambda c: ("a" + c).isidentifier() and not WORD.match(c))
    less = ranges(lambda c: bool(WORD.match(c)) and not ("a" + c).isidentifier())
    print(f"// Unicode {unicodedata.unidata_version}")
    # grouped: Lark pastes a terminal's regex into the one that uses it as it is
    print(f"_ID_START: /(?:[^\\W\\d{char_class(start_less)[1:-1]}]|{char_class(start_more)})/")
    print(f"_ID_CONTINUE: /(?:[^\\W{char_class(less)[1:-1]}]|{char_class(more)})/")


if __name__ == "__main__":
    main()
