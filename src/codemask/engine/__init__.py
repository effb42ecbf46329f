"""The grammar engine: automata, parser states, token-mask cache, matcher and bitmask ops."""

from codemask.engine.bitmask import allocate_token_bitmask, apply_token_bitmask_, reset_token_bitmask
from codemask.engine.compiler import CompiledGrammar, GrammarCompiler
from codemask.engine.matcher import GrammarMatcher

__all__ = [
    "CompiledGrammar",
    "GrammarCompiler",
    "GrammarMatcher",
    "allocate_token_bitmask",
    "apply_token_bitmask_",
    "reset_token_bitmask",
]
