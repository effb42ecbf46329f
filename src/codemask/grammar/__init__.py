"""Grammar front-ends and the IR they produce."""

from codemask.grammar.grammar import Grammar

__all__ = ["Grammar"]
