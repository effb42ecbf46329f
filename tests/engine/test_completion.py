"""Code completion with the Python grammar: prefix=, until= scopes, suffix= (fill-in-the-middle).

Every case is a prefix (the file up to the cursor) and a completion; the matcher is made with the
options, the completion is fed token by token through the Llama-3 tokenizer, and the test checks
whether each token is allowed (mask and accept_token agree) and whether EOS is allowed at the end.
"""

from __future__ import annotations

import functools

import pytest

from codemask import Grammar, GrammarMatcher, MatcherError
from codemask.engine.compiler import CompiledGrammar
from tests.engine.conftest import compiler, encode, vocabulary

DEF = "import os\n\ndef f(x):\n    y = x + 1\n    "


@functools.cache
def python() -> CompiledGrammar:
    return compiler("llama3").compile(Grammar.builtin("python"))


def outcome(prefix: str, completion: str, until: str | None = None, suffix: str | None = None) -> str:
    """'refused' (some token refused), 'end' (EOS allowed after it) or 'open'."""
    matcher = GrammarMatcher(python(), prefix=prefix, until=until, suffix=suffix)
    for token in encode("llama3", completion):
        allowed = matcher.is_token_allowed(token)
        assert allowed == matcher.fork().accept_token(token)
        if not allowed:
            return "refused"
        matcher.accept_token(token)
    eos = vocabulary("llama3").eos_token_id
    assert matcher.is_token_allowed(eos) == matcher.can_terminate()
    return "end" if matcher.can_terminate() else "open"


@pytest.mark.parametrize(("prefix", "until", "completion", "expected"), [
    ("x = fo", "line", "o(1)", "end"),
    ("x = fo", "line", "o(1)\n", "end"),
    ("x = fo", "line", "o(", "open"),
    ("x = fo", "line", "o(1)\ny = 2", "refused"),
    (DEF, "line", "if y:", "end"),
    (DEF, "line", "return y\n    z", "refused"),
    (DEF, "statement", "return y\n", "end"),
    (DEF, "statement", "return y\n    z = 1", "refused"),
    (DEF, "statement", "if y:", "open"),
    (DEF, "statement", "if y:\n        pass\n", "end"),
    (DEF, "statement", "if y:\n        pass\n    else:\n        pass\n", "end"),
    (DEF, "statement", "if y:\n        pass\n    z = 1", "refused"),
    (DEF, "block", "z = 1\n    return y\n", "end"),
    (DEF, "block", "z = 1\n    return y\nq = 1", "refused"),
    (DEF, "function", "return y\n    q = 1\n", "end"),
    (DEF, "function", "return y\nq = 1", "refused"),
    ("import os\n", "function", "x = 1\n", "open"),
    ("import os\n", "function", "@dec\ndef g():\n    return 1\n", "end"),
    ("import os\n", "function", "def g(): return 1\nz = 1", "refused"),
    ("import os\n", "statement", "try:\n    pass\nexcept E:\n    pass\n", "end"),
    ("import os\n", None, "x = 1\n", "end"),
    ("def f(x):\n    return ", None, "x\n", "end"),
])
def test_until_scopes(prefix: str, until: str | None, completion: str, expected: str) -> None:
    assert outcome(prefix, completion, until) == expected


@pytest.mark.parametrize(("prefix", "completion", "suffix", "expected"), [
    ("def f(x):\n    return ", "x + 1", "\n\nprint(f(2))\n", "end"),
    ("def f(x):\n    return ", "x + ", "\n\nprint(f(2))\n", "open"),  # `x + \n` cannot continue
    ("def f(x):\n    return (", "x", ")\n", "end"),
    ("def f(x):\n    return (", "x)", ")\n", "open"),
    ("x = [1, ", "2", "]\n", "end"),
    ("x = [1, ", "2]", "]\n", "open"),
])
def test_suffix(prefix: str, completion: str, suffix: str, expected: str) -> None:
    assert outcome(prefix, completion, suffix=suffix) == expected


def test_suffix_with_a_scope() -> None:
    assert outcome("def f(x):\n    ", "y = x\n    ", "statement", suffix="return y\n") == "end"
    assert outcome("def f(x):\n    ", "y = (x", "statement", suffix=")\n    return y\n") == "open"


def test_bad_options_are_clear_errors() -> None:
    with pytest.raises(MatcherError, match="prefix"):
        GrammarMatcher(python(), prefix="x = )")
    with pytest.raises(MatcherError, match="until"):
        GrammarMatcher(python(), until="paragraph")
    with pytest.raises(MatcherError, match="until"):
        GrammarMatcher(compiler("llama3").compile(Grammar.builtin("json")), until="line")


def test_reset_returns_to_the_cursor() -> None:
    matcher = GrammarMatcher(python(), prefix="x = ", until="line")
    assert matcher.accept_string("1")
    matcher.reset()
    assert not matcher.can_terminate()
    assert matcher.accept_string("2\n") and matcher.can_terminate()


def test_a_line_completed_in_the_middle_ends_where_the_rest_of_the_line_closes_it() -> None:
    """The cursor inside ``if name.endswith(`` with ``):`` after it: EOS once the argument is
    written (the rest of the line then closes it), not before, and not after a second ``)``."""
    prefix = "def f(names):\n    for name in names:\n        if name.endswith("
    suffix = "):\n            print(name)\n"
    assert outcome(prefix, "'.py'", "line", suffix=suffix) == "end"
    assert outcome(prefix, "'.py", "line", suffix=suffix) == "open"
    assert outcome(prefix, "'.py')", "line", suffix=suffix) == "open"
    assert outcome("x = ", "1", "line", suffix="\ny = 2\n") == "end"  # a cursor at the end of its line
