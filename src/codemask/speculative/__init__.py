"""Speculative verification: drafted tokens confirmed by the target model in one forward pass.

``constrained_generate(..., speculative="auto")`` drafts from the grammar's forced text and from
the context (a suffix automaton and n-grams over prompt + output) and keeps exactly what plain
decoding would have produced; pass a :class:`Drafter` to choose the sources.
"""

from codemask.speculative.automaton import SuffixAutomaton
from codemask.speculative.drafters import (
    ChainDrafter,
    DraftEnv,
    Drafter,
    DraftState,
    GrammarDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    SuffixDrafter,
    auto_drafter,
)
from codemask.speculative.loop import SpeculativeRunner, resolve_drafter
from codemask.speculative.verify import DraftLength

__all__ = [
    "ChainDrafter",
    "DraftEnv",
    "DraftLength",
    "DraftState",
    "Drafter",
    "GrammarDrafter",
    "ModelDrafter",
    "PromptLookupDrafter",
    "SpeculativeRunner",
    "SuffixAutomaton",
    "SuffixDrafter",
    "auto_drafter",
    "resolve_drafter",
]
