"""The lazy parser core (calls not expanded until a symbol takes them, `ParserCore(lazy=True)`,
which lexer-mode grammars use) against the expanded one it replaced: the same masks at every
token of real files in every code language, the same verdict on every byte, and the same end
of input; and the first sets the lazy core's steps rely on against a brute-force reading of the
RTN."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import numpy as np
import pytest

from codemask import Grammar
from codemask.engine import native
from codemask.engine.lexer import LexerCore, LexParserCore
from codemask.engine.lexer_masks import LexerMaskComputer
from codemask.engine.parser import DEAD, ParserCore, first_sets
from tests.engine.conftest import compiler, encode, vocabulary

CODE = Path(__file__).resolve().parents[1] / "data" / "code"

SOURCES = {
    "python": textwrap.dedent(inspect.getsource(textwrap.TextWrapper))
    + textwrap.dedent(inspect.getsource(textwrap.indent)),
    "go": (CODE / "go" / "server.go").read_text(encoding="utf-8"),
    "sql": (CODE / "sql" / "analytics.sql").read_text(encoding="utf-8"),
    "c": (CODE / "c" / "linked_list.c").read_text(encoding="utf-8"),
    "java": (CODE / "java" / "EventBus.java").read_text(encoding="utf-8"),
    "javascript": (CODE / "javascript" / "todo_store.js").read_text(encoding="utf-8"),
}


def cores(language: str) -> tuple[LexParserCore, LexParserCore]:
    """A lazy and an expanded lexer-mode core of the same compiled grammar."""
    artifacts = compiler("smollm2").compile(Grammar.builtin(language)).artifacts
    assert artifacts.terminals is not None
    return tuple(LexParserCore(ParserCore(artifacts.rtn, lazy=lazy), LexerCore(artifacts.terminals))  # type: ignore[return-value]
                 for lazy in (True, False))


@pytest.mark.parametrize("use_native", [True, False])
@pytest.mark.parametrize("language", sorted(SOURCES))
def test_a_lazy_core_masks_as_the_expanded_one_at_every_token(language: str, use_native: bool) -> None:
    vocab = vocabulary("smollm2")
    lazy, expanded = cores(language)
    assert lazy.parser.lazy and not expanded.parser.lazy
    masks = [LexerMaskComputer(core, vocab) for core in (lazy, expanded)]
    states = [lazy.initial, expanded.initial]
    tokens = encode("smollm2", SOURCES[language])[: 400 if use_native else 120]
    with native.using(use_native):
        for step, token in enumerate(tokens):
            got, want = (computer.mask(state) for computer, state in zip(masks, states, strict=True))
            assert (got == want).all(), f"step {step}"
            data = vocab.token_bytes[token]
            states = [core.walk(state, data) for core, state in zip((lazy, expanded), states, strict=True)]
            assert DEAD not in states, f"token {step} {data!r} refused"
    assert lazy.can_end(states[0]) == expanded.can_end(states[1])


@pytest.mark.parametrize("language", ["python", "javascript"])
def test_a_lazy_core_refuses_the_bytes_the_expanded_one_refuses(language: str) -> None:
    """Byte by byte through a file with a character changed every so often: both cores agree on
    every byte of every variant (which bytes keep the parse alive), and on the end of input."""
    lazy, expanded = cores(language)
    text = SOURCES[language].encode()[:1500]
    rng = np.random.default_rng(5)
    for _ in range(6):
        data = bytearray(text)
        for at in rng.integers(0, len(data), 3).tolist():
            data[at] = int(rng.choice(list(b"()[]{}:;,.=+- \n\tax0'\"")))
        states = [lazy.initial, expanded.initial]
        for b in data:
            nxt = [int(core.advance(np.array([state]), np.array([b]))[0])
                   for core, state in zip((lazy, expanded), states, strict=True)]
            assert (nxt[0] == DEAD) == (nxt[1] == DEAD)
            allowed = [core.allowed_symbols(state) for core, state in zip((lazy, expanded), states, strict=True)]
            assert (allowed[0] == allowed[1]).all()
            if nxt[0] == DEAD:
                break
            states = nxt
        else:
            assert lazy.can_end(states[0]) == expanded.can_end(states[1])


def test_first_sets_are_the_symbols_a_frame_can_take_before_it_ends() -> None:
    """`first_sets` against a search of the RTN itself: from each state, every path of calls and
    returns from callees that can end without a symbol, collecting the symbols taken on the way."""
    rtn = compiler("smollm2").compile(Grammar.builtin("python")).artifacts.rtn
    core = ParserCore(rtn, lazy=True)
    starts = [int(s) for s in rtn.rule_start]

    def can_end(q: int, seen: frozenset[int]) -> bool:
        if rtn.accepting[q]:
            return True
        return any(starts[callee] not in seen and can_end(starts[callee], seen | {starts[callee]})
                   and can_end(ret, seen | {ret}) for callee, ret in rtn.calls[q] if ret not in seen)

    def symbols(q: int) -> set[int]:
        found: set[int] = set()
        todo, seen = [q], {q}
        while todo:
            x = todo.pop()
            found.update(np.flatnonzero(rtn.trans[x] >= 0).tolist())
            for callee, ret in rtn.calls[x]:
                nxt = [starts[callee]] + ([ret] if can_end(starts[callee], frozenset({starts[callee]})) else [])
                for y in nxt:
                    if y not in seen:
                        seen.add(y)
                        todo.append(y)
        return found

    first, nullable = first_sets([sum(1 << int(a) for a in np.flatnonzero(row >= 0)) for row in rtn.trans],
                                 [bool(a) for a in rtn.accepting], core._calls)
    for q in range(0, rtn.num_states, 7):
        assert {a for a in range(core.alphabet) if first[q] >> a & 1} == symbols(q), q
        assert nullable[q] == can_end(q, frozenset({q})), q


NULLABLE_CALLS = r"""
start: "(" a ")" | e d | "m" g | "[" h "]"
a: b "x" | c? "z" a?
b: c*
c: "y" | "w" b
d: f f "q"
e: "p"?
f: "k"?
g: b
h: (f | c)* "x" f
"""


@pytest.mark.parametrize("use_native", [True, False])
def test_a_lazy_core_takes_symbols_after_callees_that_match_nothing(use_native: bool) -> None:
    """Every string of up to six symbols over a grammar whose rules may match nothing, called in
    every position (first, in the middle, last, repeated, nested): both cores keep and refuse the
    same prefixes and accept the same strings. A lazy step must take a symbol after a nullable
    callee inside a predicted rule (`(x)`: `b` matches nothing before `x`)."""
    artifacts = compiler("smollm2").compile(Grammar.from_lark(NULLABLE_CALLS)).artifacts
    assert artifacts.terminals is not None
    with native.using(use_native):
        lazy, expanded = (LexParserCore(ParserCore(artifacts.rtn, lazy=flag), LexerCore(artifacts.terminals))
                          for flag in (True, False))
        accepted = 0
        todo = [(b"", lazy.initial, expanded.initial)]
        while todo:
            text, a, b = todo.pop()
            assert lazy.can_end(a) == expanded.can_end(b), text
            accepted += lazy.can_end(a)
            if len(text) == 6:
                continue
            for byte in b"()[]xyzwpqkm":
                nxt = lazy.walk(a, bytes([byte])), expanded.walk(b, bytes([byte]))
                assert (nxt[0] == DEAD) == (nxt[1] == DEAD), text + bytes([byte])
                if nxt[0] != DEAD:
                    todo.append((text + bytes([byte]), *nxt))
        assert lazy.can_end(lazy.walk(lazy.initial, b"(x)"))
    assert accepted > 100
