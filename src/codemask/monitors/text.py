"""Text helpers for the language-server protocol: UTF-16 positions, minimal edits, snippets, code scanning.

LSP positions count UTF-16 code units per line (the protocol's default and the only encoding every
server accepts), while Python strings count code points: a character outside the BMP (an emoji, a
CJK extension ideograph) is one code point but two UTF-16 units. Every position codemask sends is
computed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SNIPPET_PLACEHOLDER = re.compile(r"\$\{\d+(?::((?:[^{}\\]|\\.)*))?\}|\$\{\d+\|([^,|}]*)[^}]*\}|\$\d+")


def utf16_length(text: str) -> int:
    """How many UTF-16 code units ``text`` takes (characters beyond U+FFFF take two)."""
    return len(text.encode("utf-16-le")) // 2


def position_of(text: str, offset: int) -> dict[str, int]:
    """The LSP ``Position`` (line, UTF-16 character) of code-point ``offset`` in ``text``."""
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    return {"line": line, "character": utf16_length(text[start:offset])}


def common_prefix_length(a: str, b: str) -> int:
    """Length of the longest common prefix, by bisection on slice equality (C-speed comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix_length(a: str, b: str, limit: int) -> int:
    """Length of the longest common suffix, at most ``limit`` characters."""
    lo, hi = 0, min(len(a), len(b), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:len(a) - lo] == b[len(b) - mid:len(b) - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class Edit:
    """One ``TextDocumentContentChangeEvent``: replace ``old[start:end]`` by ``text``."""

    start: int
    end: int
    text: str

    def as_change(self, old: str) -> dict[str, object]:
        """The protocol's incremental change, with the range in UTF-16 positions of ``old``."""
        return {"range": {"start": position_of(old, self.start), "end": position_of(old, self.end)},
                "text": self.text}


def minimal_edit(old: str, new: str) -> Edit | None:
    """The single range replacement that turns ``old`` into ``new`` (None when they are equal).

    Applying the edit for ``(new, old)`` afterwards restores ``old`` exactly, which is how temporary
    edits (a probe ``.`` after an identifier, a dropped partial name) are undone.
    """
    if old == new:
        return None
    prefix = common_prefix_length(old, new)
    suffix = common_suffix_length(old, new, min(len(old), len(new)) - prefix)
    return Edit(prefix, len(old) - suffix, new[prefix:len(new) - suffix])


def strip_snippet(text: str) -> str:
    """The plain text of an LSP snippet: ``${1:x}`` → ``x``, ``${1|a,b|}`` → ``a``, ``$0`` → ``""``."""
    if "$" not in text:
        return text
    stripped = _SNIPPET_PLACEHOLDER.sub(lambda m: m.group(1) or m.group(2) or "", text)
    return re.sub(r"\\([$}\\])", r"\1", stripped)


class CodeScanner:
    """Finds whether the end of a text is in code (not in a string or comment) and its open brackets.

    ``strings`` match whole (terminated) string literals, ``unterminated`` a literal that runs to the
    end of the text, ``comments`` whole comments; ``starts`` holds the characters that begin any of
    them. Scanning resumes from the last position known to be between tokens, so a growing text (the
    prompt, then one token more per step) costs only its new part.
    """

    def __init__(self, strings: list[str], unterminated: list[str], comments: list[str], starts: str) -> None:
        closed = "|".join(f"(?:{p})" for p in strings) or "(?!)"
        other = "|".join(f"(?:{p})" for p in [*unterminated, *comments]) or "(?!)"
        self._skip = re.compile(f"(?P<closed>{closed})|{other}")
        self._code = re.compile(f"[^{re.escape(starts)}]+") if starts else re.compile(r"[\s\S]+")
        self._brackets = re.compile(r"[()\[\]{},]")
        self._parts = re.compile(f"(?P<skip>{closed}|{other})|[()\\[\\]{{}},]")
        self._text = ""
        self._resume = 0  # a position between tokens in self._text
        self._stack: tuple[tuple[str, int, int], ...] = ()

    def scan(self, text: str) -> tuple[bool, tuple[tuple[str, int, int], ...]]:
        """``(in_code, open_brackets)`` at the end of ``text``.

        ``open_brackets`` lists the unclosed brackets outermost first, each as (character, offset,
        offset of the last comma directly inside it or -1).
        """
        if not (len(text) >= self._resume and text.startswith(self._text[: self._resume])):
            self._resume, self._stack = 0, ()
        pos, stack, in_code = self._resume, list(self._stack), True
        last_start, last_stack = pos, tuple(stack)
        while pos < len(text):
            last_start, last_stack = pos, tuple(stack)
            code = self._code.match(text, pos)
            if code is not None:
                self._track(code.group(), pos, stack)
                pos = code.end()
                continue
            skipped = self._skip.match(text, pos)
            if skipped is None:  # a stray quote (a broken literal): read it as code
                pos += 1
            elif skipped.end() == len(text) and skipped.group("closed") is None:
                in_code = False  # inside a string or comment that the next characters continue
                break
            else:
                pos = skipped.end()
        self._text, self._resume, self._stack = text, last_start, last_stack
        return in_code, tuple(stack)

    def arguments(self, text: str, start: int) -> list[str]:
        """``text[start:]`` split at its top-level commas (commas inside brackets, strings and comments
        do not split): the arguments of a call whose ``(`` is just before ``start``, the last one
        being the one written now. Loops over bracket and string matches only, in a short span."""
        parts: list[str] = []
        depth, begin = 0, start
        for m in self._parts.finditer(text, start):
            char = m.group()
            if m.group("skip") is not None:
                continue
            if char in "([{":
                depth += 1
            elif char in ")]}":
                depth -= 1
            elif depth == 0:
                parts.append(text[begin:m.start()])
                begin = m.end()
        parts.append(text[begin:])
        return parts

    def _track(self, code: str, offset: int, stack: list[tuple[str, int, int]]) -> None:
        pairs = {")": "(", "]": "[", "}": "{"}
        for m in self._brackets.finditer(code):
            char, at = m.group(), offset + m.start()
            if char in "([{":
                stack.append((char, at, -1))
            elif char == ",":
                if stack:
                    stack[-1] = (stack[-1][0], stack[-1][1], at)
            elif stack and stack[-1][0] == pairs[char]:
                stack.pop()
