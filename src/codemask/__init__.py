"""codemask: constrained and structured code generation with exact token masks."""

from codemask.errors import (
    CodemaskError,
    GrammarError,
    GrammarSyntaxError,
    InvalidSchemaError,
    MatcherError,
    UnsupportedSchemaError,
)
from codemask.grammar import Grammar

__all__ = [
    "CodemaskError",
    "Grammar",
    "GrammarError",
    "GrammarSyntaxError",
    "InvalidSchemaError",
    "MatcherError",
    "UnsupportedSchemaError",
]
