"""`Recognizer`: does a text belong to a grammar's language? No tokenizer, no masks.

Validating a finished output, checking test instances against a JSON Schema grammar, or asking
whether a prefix can still be completed only needs the engine's byte-level parser, not the
per-token mask cache that compiling for a vocabulary builds. So this is cheap to construct (the
automata only) and walks bytes with the same parser states the matcher uses: what it accepts is
exactly what a matcher accepts byte by byte.
"""

from __future__ import annotations

from codemask.engine.automaton import build_rtn
from codemask.engine.lexer import LexerCore, LexParserCore, build_terminal_automata
from codemask.engine.parser import DEAD, ParserCore
from codemask.grammar.grammar import Grammar
from codemask.grammar.optimize import optimize


class Recognizer:
    """Membership and prefix tests of byte strings against one grammar."""

    def __init__(self, grammar: Grammar) -> None:
        ir = optimize(grammar.ir)
        bodies = {name: rule.body for name, rule in ir.rules.items()}
        self._core: ParserCore | LexParserCore
        if ir.lexer_mode:
            terminals = list(ir.terminals.values())
            index = {t.name: i for i, t in enumerate(terminals)}
            rtn = build_rtn(bodies, ir.start, alphabet=max(len(terminals), 1), terminal_index=index)
            automata = build_terminal_automata(terminals, set(ir.ignore))
            self._core = LexParserCore(ParserCore(rtn, lazy=True), LexerCore(automata))
        else:
            self._core = ParserCore(build_rtn(bodies, ir.start))

    def accepts(self, text: str | bytes) -> bool:
        """Whether the whole text is in the language."""
        state = self._walk(text)
        return state != DEAD and self._core.can_end(state)

    def accepts_prefix(self, text: str | bytes) -> bool:
        """Whether some continuation of the text is in the language."""
        return self._walk(text) != DEAD

    def _walk(self, text: str | bytes) -> int:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return self._core.walk(self._core.initial, data)
