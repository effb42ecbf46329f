"""Differential testing of the Python grammar against CPython's own parser (``ast.parse``).

- :func:`stdlib_files` — the standard library's modules that ``ast.parse`` accepts (UTF-8).
- :func:`mutants` — small random edits of a source at Python-token granularity (delete,
  duplicate, swap, insert a token or a character), each labelled by ``ast.parse``.
- :func:`byte_verdict` — how far the engine takes a text byte by byte, and whether it accepts it.

Used by ``tests/grammar/test_python.py`` (a sample) and ``benchmarks/python_stdlib.py`` (all).
"""

from __future__ import annotations

import ast
import io
import random
import tokenize
import warnings
from dataclasses import dataclass
from pathlib import Path

STDLIB = Path("/usr/lib/python3.11")
_INSERTS = ["(", ")", "[", "]", "{", "}", ":", ",", ".", "=", "==", "*", "**", "if", "else", "def", "return",
            "lambda", "not", "in", "is", "\n", "    ", "\t", "'", '"', "#", "\\", "@", "->", ":=", "1", "0x", "_", "x"]


def parses(source: str | bytes) -> bool:
    """Whether CPython's parser (this interpreter's ``ast.parse``) accepts the source."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ast.parse(source)
        except (SyntaxError, ValueError):
            return False
    return True


def stdlib_files(root: Path = STDLIB) -> list[Path]:
    """Every ``.py`` file under ``root`` that is UTF-8 and that ``ast.parse`` accepts, sorted."""
    found = []
    for path in sorted(root.rglob("*.py")):
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if parses(data):
            found.append(path)
    return found


@dataclass(frozen=True)
class Mutant:
    """An edited source, where the edit starts (byte offset), what it was, and CPython's verdict."""

    text: str
    offset: int
    edit: str
    valid: bool


def _tokens(source: str) -> list[tuple[int, int, str]]:
    """(start offset, end offset, text) of the source's tokens (strings and comments included)."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.ENDMARKER, tokenize.DEDENT, tokenize.INDENT) or not tok.string:
                continue
            begin = starts[tok.start[0] - 1] + tok.start[1]
            end = starts[tok.end[0] - 1] + tok.end[1]
            out.append((begin, end, source[begin:end]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def mutants(source: str, count: int, seed: int) -> list[Mutant]:
    """``count`` random single edits of ``source`` (character offsets turned into UTF-8 bytes)."""
    rng = random.Random(seed)
    tokens = _tokens(source)
    if not tokens:
        return []
    out = []
    for _ in range(count):
        begin, end, text = rng.choice(tokens)
        kind = rng.choice(["delete", "duplicate", "swap", "insert", "delete-char", "insert-char"])
        if kind == "delete":
            edited, at = source[:begin] + source[end:], begin
        elif kind == "duplicate":
            edited, at = source[:end] + " " + text + source[end:], end
        elif kind == "swap":
            index = tokens.index((begin, end, text))
            if index + 1 >= len(tokens):
                continue
            nb, ne, nt = tokens[index + 1]
            edited, at = source[:begin] + nt + source[end:nb] + text + source[ne:], begin
        elif kind == "insert":
            word = rng.choice(_INSERTS)
            edited, at = source[:begin] + word + " " + source[begin:], begin
        elif kind == "delete-char":
            pos = rng.randrange(begin, end)
            edited, at = source[:pos] + source[pos + 1:], pos
        else:
            pos = rng.randrange(begin, end + 1)
            edited, at = source[:pos] + rng.choice("()[]{}:,.='\"#\\ \n\tx1") + source[pos:], pos
        if edited != source:
            out.append(Mutant(edited, len(edited[:at].encode("utf-8")), kind, parses(edited)))
    return out


def byte_verdict(core, data: bytes) -> tuple[int, bool]:  # type: ignore[no-untyped-def]
    """(bytes taken before the first refused one, accepted as a whole) for a lexer-mode core."""
    state = core.initial
    for i, byte in enumerate(data):
        nxt = core.step(state, byte)
        if nxt < 0:
            return i, False
        state = nxt
    return len(data), bool(core.can_end(state))
