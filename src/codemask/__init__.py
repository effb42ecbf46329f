"""codemask: constrained and structured code generation with exact token masks."""

from codemask._version import __version__
from codemask.adadec import AdaDec
from codemask.decoding.stats import GenerationStats
from codemask.engine import (
    CompiledGrammar,
    GrammarCompiler,
    GrammarMatcher,
    allocate_token_bitmask,
    apply_token_bitmask_,
    reset_token_bitmask,
)
from codemask.errors import (
    CodemaskError,
    GrammarError,
    GrammarSyntaxError,
    InvalidSchemaError,
    MatcherError,
    UnsupportedSchemaError,
)
from codemask.generate import GenerationResult, Sampling, constrained_generate
from codemask.grammar import Grammar
from codemask.repetition import RPG
from codemask.vocab import Vocabulary

__all__ = [
    "RPG",
    "AdaDec",
    "CodemaskError",
    "CompiledGrammar",
    "GenerationResult",
    "GenerationStats",
    "Grammar",
    "GrammarCompiler",
    "GrammarError",
    "GrammarMatcher",
    "GrammarSyntaxError",
    "InvalidSchemaError",
    "MatcherError",
    "Sampling",
    "UnsupportedSchemaError",
    "Vocabulary",
    "__version__",
    "allocate_token_bitmask",
    "apply_token_bitmask_",
    "constrained_generate",
    "reset_token_bitmask",
]
