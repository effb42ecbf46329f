"""The builtin Python grammar against CPython's parser (``ast.parse``, Python 3.11 here).

- a sample of the standard library, byte by byte, must be accepted (the whole library:
  ``benchmarks/python_stdlib.py``);
- small modules fed token by token through the Llama-3 tokenizer: every token's mask bit agrees
  with ``accept_token`` and allows it, and EOS is allowed exactly at the end;
- random single edits (mutants) of library files: those ``ast.parse`` rejects must not be
  accepted, those it accepts must be;
- Python 3.12 syntax the 3.11 oracle cannot judge (PEP 695 generics and ``type`` aliases, PEP 701
  f-strings) with hand-written verdicts.
"""

from __future__ import annotations

import functools
import sysconfig
import zlib
from pathlib import Path

import pytest

from codemask import Grammar, GrammarMatcher
from codemask.engine.recognizer import Recognizer
from tests.engine.conftest import compiler, encode, vocabulary
from tests.python_harness import byte_verdict, mutants, parses, stdlib_files


@functools.cache
def library() -> list:  # type: ignore[type-arg]
    return stdlib_files()


@functools.cache
def recognizer() -> Recognizer:
    return Recognizer(Grammar.builtin("python"))


def sample(count: int, offset: int = 0) -> list:  # type: ignore[type-arg]
    files = library()
    step = max(1, len(files) // count)
    return files[offset::step][:count]


def test_library_found() -> None:
    assert len(library()) > 500


@functools.cache
def third_party() -> list[Path]:
    """Modules of this environment's installed packages (torch, transformers, numpy...): real code
    that is not the standard library the grammar was developed on."""
    root = Path(sysconfig.get_paths()["purelib"])
    return [p for p in sorted(root.rglob("*.py")) if 500 <= p.stat().st_size <= 60_000]


@pytest.mark.parametrize("index", range(3))
def test_installed_packages_accepted_byte_by_byte(index: int) -> None:
    files = third_party()
    assert len(files) > 1000
    checked, refused = 0, []
    for path in files[index::len(files) // 150]:
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text.startswith("\ufeff") or not parses(text):
            continue  # the grammar takes UTF-8 without a byte-order mark; ast.parse is the oracle
        checked += 1
        if not recognizer().accepts(data):
            refused.append(str(path))
    assert checked > 120
    assert not refused


@pytest.mark.parametrize("index", range(4))
def test_stdlib_sample_accepted_byte_by_byte(index: int) -> None:
    refused = [str(f) for f in sample(12, index) if not recognizer().accepts(f.read_bytes())]
    assert not refused


@pytest.mark.slow
def test_stdlib_token_by_token_with_masks() -> None:
    compiled = compiler("llama3").compile(Grammar.builtin("python"))
    eos = vocabulary("llama3").eos_token_id
    files = sorted(library(), key=lambda f: f.stat().st_size)[40:120:40]
    for path in files:
        matcher = GrammarMatcher(compiled)
        for token in encode("llama3", path.read_text(encoding="utf-8")):
            assert matcher.is_token_allowed(token), (path, token)
            assert matcher.accept_token(token)
        assert matcher.is_token_allowed(eos) and matcher.accept_token(eos)


@pytest.mark.parametrize("index", range(3))
def test_mutants_agree_with_ast_parse(index: int) -> None:
    wrong = []
    checked = 0
    for path in sample(8, index):
        for mutant in mutants(path.read_text(encoding="utf-8"), 8, seed=zlib.crc32(path.name.encode())):
            _taken, accepted = byte_verdict(recognizer()._core, mutant.text.encode("utf-8"))
            checked += 1
            if accepted != mutant.valid:
                wrong.append((path.name, mutant.edit, mutant.offset, mutant.valid))
    assert checked > 40
    assert not wrong


PY312 = [
    # PEP 695: type parameters and aliases
    ("class A[T]:\n    pass\n", True),
    ("class A[T: int, *Ts, **P](Base):\n    pass\n", True),
    ("def f[T](x: T) -> T:\n    return x\n", True),
    ("async def f[T: (int, str)](): pass\n", True),
    ("type X = int\n", True),
    ("type Pair[T] = tuple[T, T]\n", True),
    ("type = 1\ntype.x = 2\n", True),  # `type` stays a name
    ("class A[]:\n    pass\n", False),
    ("type X\n", False),
    ("def f[T]:\n    pass\n", False),
    # PEP 701: f-strings with nested quotes, format specs, comments and backslashes in fields
    ('f"{x["a"]}"\n', True),
    ('f"{f"{f"{x}"}"}"\n', True),
    ("f'{x!r:>{width}.{precision}}'\n", True),
    ('f"{x = }"\n', True),
    ("f'''{\n    x  # a comment\n}'''\n", True),
    ('f"{"\\n".join(a)}"\n', True),
    ('f"{{literal}} {x}"\n', True),
    ('rf"\\{x}"\n', True),
    ('f"{}"\n', False),
    ('f"{x!z}"\n', False),
    ('f"{x"\n', False),
    ('f"}"\n', False),
]


@pytest.mark.parametrize(("text", "valid"), PY312)
def test_python_312_syntax(text: str, valid: bool) -> None:
    assert recognizer().accepts(text) == valid


@pytest.mark.parametrize("text", [
    "x = 1\n", "f(a=1, b)\n", "f(**k, *a)\n", "def f(a=1, b): pass\n", "del f()\n", "f() = 1\n",
    "(a, b) += 1\n", "a, b: int\n", "x := 1\n", "x.if = 1\n", "target.is_file is_file()\n",
    "b'a' 'b'\n", "b'\\xe9'\n", "'\\x4'\n", "0777\n", "1_\n", "0b2\n", "print 'x'\n",
    "try:\n    pass\nexcept* E:\n    pass\nexcept F:\n    pass\n", "match x:\n    case 1+2:\n        pass\n",
    "lambda a=1, b: 0\n", "def f(*): pass\n", "from a import (*)\n", "[*a for a in b]\n",
])
def test_rejections_agree_with_ast_parse(text: str) -> None:
    assert recognizer().accepts(text) == parses(text)


@pytest.mark.parametrize("prefix", ["To: use a", "x = y is", "if a no"])
def test_half_a_character_that_can_only_end_a_refused_identifier_is_a_dead_end(prefix: str) -> None:
    """After an expression only a keyword may start a name (``and``, ``is``...): the lexeme must die
    as soon as no keyword is left, even in the middle of a UTF-8 character, or the mask allows a
    token after which nothing is allowed (SmolLM2 wrote ``a`` + the first two bytes of ``几``)."""
    grammar = recognizer()
    assert grammar.accepts_prefix(prefix)
    for character in ("几", "é", "𝔘"):
        data = (prefix + character).encode()
        for cut in range(len(prefix.encode()) + 1, len(data) + 1):
            assert not grammar.accepts_prefix(data[:cut]), data[:cut]
    assert grammar.accepts("x = a几 + 1\n") and grammar.accepts("if a and é:\n    pass\n")


BACKSLASH = "\\"


@pytest.mark.parametrize("prefix", ["f", "F", "rf", "fR", "Rf"])
@pytest.mark.parametrize("quote", ['"', "'", '"""', "'''"])
@pytest.mark.parametrize("body", [
    2 * BACKSLASH, 4 * BACKSLASH, "a" + 2 * BACKSLASH + "{b}" + 2 * BACKSLASH, BACKSLASH + "{b}", BACKSLASH + "}}",
    BACKSLASH, 3 * BACKSLASH, 2 * BACKSLASH + "{b!r}" + BACKSLASH, "x" + BACKSLASH + "N{DIGIT ONE}" + 2 * BACKSLASH,
])
def test_fstring_backslashes_agree_with_ast_parse(prefix: str, quote: str, body: str) -> None:
    """A backslash in an f-string's text takes the next character with it: ``f"\\\\"`` ends in an
    escaped backslash. The text pieces had a lone-backslash alternative (for a backslash before a
    field), so longest match read ``\\`` + ``\\"`` and swallowed the closing quote, refusing every
    f-string whose text ends in an escaped backslash, as some installed packages have."""
    text = f"x = {prefix}{quote}{body}{quote}\n"
    assert recognizer().accepts(text) == parses(text), text


def test_identifiers_are_xid_characters_as_python_checks_them() -> None:
    """Every non-ASCII character, sampled over all planes, starts or continues a name exactly where
    Python accepts it: combining marks continue one (Devanagari vowel signs, Hebrew points), ``²``
    does not, though Python re's ``\\w`` holds it."""
    grammar = recognizer()
    wrong = []
    for code in [*range(0x80, 0x3000, 7), *range(0x3000, 0x110000, 331), 0x05B4, 0x093E, 0x203F, 0x00B2, 0x2118]:
        if 0xD800 <= code <= 0xDFFF:
            continue
        for text in (f"{chr(code)} = 1\n", f"a{chr(code)} = 1\n"):
            if grammar.accepts(text) != parses(text):
                wrong.append((hex(code), text))
    assert not wrong, wrong[:10]
    assert grammar.accepts("नाम = 2\nprint(नाम)\n") and not grammar.accepts("x² = 1\n")


@pytest.mark.parametrize("text", [
    "x = 1 \\\n", "x = 1 \\\n  ", "x = 1 \\\n# c", "x = 1 \\\r\n", "if x:\n    y = 1 \\\n", "x = 1\n\\\n", "\\\n",
    "x = 1 \\\n\\\n", "x = 1 \\\n\n", "x = 1 + \\\n 2\n", "x = 1 \\\n \\\n",
])
def test_the_input_ends_after_a_line_join_where_python_lets_it(text: str) -> None:
    """CPython refuses the end of the input right after a backslash and LF ("unexpected EOF"),
    not after blanks or a comment that follow it (two of 1,641 invalid mutants of installed
    packages were accepted: a backslash added at the end of a file)."""
    assert recognizer().accepts(text) == parses(text)


@pytest.mark.parametrize("text", [
    "def f():\n    x = 1\n\\\n    y = 2\n    z = 3\n", "if a:\n\\\n    b\n", "x = 1\n\\\n  y = 2\n",
    "def f():\n    x = 1\n  \\\n    y = 2\n", "def f():\n    x = 1\n    \\\n    y = 2\n", "x = 1\n\\\n\ny = 2\n",
    "def f():\n    x = 1\n\\\n  y = 2\n", "def f():\n    x = 1\n        \\\n    y = 2\n", "\\\nx = 1\n",
    "def f():\n    x = 1\n\\\n  \\\n    y = 2\n", "def f():\n    x = 1\n    \\\n# c\n    y = 2\n", "if a:\n    b\n\\\n",
    "x = 1\r\n\\\r\ny = 2\r\n", "def f():\n    x = 1\n    \\\n\x0c    y = 2\n",
])
def test_a_line_join_inside_the_indentation_counts_as_python_counts_it(text: str) -> None:
    """A backslash and newline at the start of a line: at column 0 the next line's indentation
    counts, after blanks the backslash's column does (CPython 3.11; a valid mutant of sympy's
    integrals.py, a join at column 0 before an indented line, was refused)."""
    assert recognizer().accepts(text) == parses(text)
