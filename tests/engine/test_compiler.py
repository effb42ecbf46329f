"""`GrammarCompiler`: compiled grammars are kept in memory, most recently used first, within a bound."""

from __future__ import annotations

from codemask import Grammar, GrammarCompiler, GrammarMatcher
from tests.engine.conftest import vocabulary


def test_memory_keeps_the_most_recently_used_grammars_within_its_size() -> None:
    compiler = GrammarCompiler(vocabulary("gpt2"), cache_dir=False, progress=False, memory_size=2)
    grammars = [Grammar.from_regex(pattern) for pattern in ("a+", "b+", "c+")]
    a, b = compiler.compile(grammars[0]), compiler.compile(grammars[1])
    assert compiler.compile(grammars[0]) is a  # a is now the most recent
    c = compiler.compile(grammars[2])  # evicts b, the least recently used
    assert compiler.compile(grammars[0]) is a and compiler.compile(grammars[2]) is c
    b_again = compiler.compile(grammars[1])
    assert b_again is not b  # rebuilt (no disk cache here) ...
    old_masks, new_masks = b.artifacts.masks, b_again.artifacts.masks
    assert old_masks is not None and new_masks is not None and (old_masks.accepted == new_masks.accepted).all()
    matcher = GrammarMatcher(b)  # ... and a matcher of the evicted one still works
    assert matcher.accept_bytes(b"bbb") and not matcher.accept_bytes(b"a")
