"""Errors raised by codemask, all deriving from :class:`CodemaskError`.

Bad input must produce one of these with a message a user can act on (line and column of a grammar
syntax error, the undefined rule, the unsupported JSON Schema keyword and its JSON pointer), never a
crash deep inside the engine.
"""

from __future__ import annotations


class CodemaskError(Exception):
    """Base class of every error codemask raises on purpose."""


class GrammarError(CodemaskError, ValueError):
    """A grammar that cannot be used: undefined rules, left recursion that cannot be removed, …"""


class GrammarSyntaxError(GrammarError):
    """A grammar text that does not parse; names the line, the column and the offending text."""

    def __init__(self, message: str, text: str, offset: int, source: str = "<grammar>") -> None:
        self.line = text.count("\n", 0, offset) + 1
        line_start = text.rfind("\n", 0, offset) + 1
        self.column = offset - line_start + 1
        line_end = text.find("\n", offset)
        self.snippet = text[line_start : line_end if line_end >= 0 else len(text)]
        self.reason = message
        self.source = source
        pointer = " " * (self.column - 1) + "^"
        super().__init__(f"{source}:{self.line}:{self.column}: {message}\n    {self.snippet}\n    {pointer}")


class UnsupportedSchemaError(GrammarError):
    """A JSON Schema construct that codemask cannot turn into an exact grammar (strict mode)."""

    def __init__(self, keyword: str, pointer: str, detail: str = "") -> None:
        self.keyword = keyword
        self.pointer = pointer or "/"
        self.detail = detail
        extra = f": {detail}" if detail else ""
        super().__init__(f"unsupported JSON Schema keyword {keyword!r} at {self.pointer}{extra}")


class InvalidSchemaError(GrammarError):
    """A JSON Schema that is not valid against its draft's meta-schema."""


class MatcherError(CodemaskError, RuntimeError):
    """Misuse of a matcher (accepting after termination, rolling back too far, …).

    The matcher's state is left as it was before the failing call.
    """


class WorkspaceError(CodemaskError, ValueError):
    """A monitors' workspace that cannot be used: a folder that does not exist, or a file."""
