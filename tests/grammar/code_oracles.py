"""The languages' own parsers, as oracles for the builtin code grammars (sql, c, go, java, javascript).

Each oracle answers one question: is this text syntactically a program of the language? They are
the reference the grammars are tested against (tests/grammar/test_code_grammars.py) and measured
with (scripts/code_grammar_rates.py): SQLite itself for SQL, ``gcc -fsyntax-only`` for C, ``node
--check`` for JavaScript, and the tree-sitter parsers for Go and Java (no Go toolchain here, and
javac checks types too). A missing oracle raises: it is an error, never a skipped check.
"""

from __future__ import annotations

import functools
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

LANGUAGES = ("sql", "c", "go", "java", "javascript")
SUFFIX = {"sql": ".sql", "c": ".c", "go": ".go", "java": ".java", "javascript": ".js"}

# SQLite reports these for text its parser refuses; everything else (no such table, constraint
# failed, wrong number of values) is a semantic or run-time error of a well-formed statement.
_SQL_SYNTAX_ERRORS = ("syntax error", "incomplete input", "unrecognized token", "unterminated")


def sql_statements(script: str) -> list[str]:
    """Split a script into complete statements with SQLite's own tokenizer (``complete_statement``)."""
    statements, start = [], 0
    for i, char in enumerate(script):
        if char == ";" and sqlite3.complete_statement(script[start:i + 1]):
            statements.append(script[start:i + 1])
            start = i + 1
    if script[start:].strip():
        statements.append(script[start:] + "\n;")  # the last statement may omit its ';'
    return statements


def sqlite_accepts(script: str) -> bool:
    """Whether SQLite parses every statement of ``script`` (run in order on an in-memory database,
    so that tables created earlier exist; semantic and run-time errors do not count)."""
    conn = sqlite3.connect(":memory:")
    try:
        for statement in sql_statements(script):
            try:
                conn.execute(statement)
            except sqlite3.Warning:  # more than one statement: the split found a ';' SQLite did not
                return False
            except sqlite3.Error as exc:
                if any(marker in str(exc) for marker in _SQL_SYNTAX_ERRORS):
                    return False
        return True
    finally:
        conn.close()


def _run_on_file(command: list[str], text: str, suffix: str) -> bool:
    """Run ``command + [file]`` on ``text`` written to a temporary file; True iff it exits with 0."""
    binary = shutil.which(command[0])
    if binary is None:
        raise RuntimeError(f"oracle {command[0]!r} is not installed")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"input{suffix}"
        path.write_text(text, encoding="utf-8")
        done = subprocess.run([binary, *command[1:], str(path)], capture_output=True, timeout=60)
    return done.returncode == 0


def gcc_accepts(source: str) -> bool:
    """``gcc -fsyntax-only`` (GNU C17, the default dialect), warnings allowed."""
    return _run_on_file(["gcc", "-fsyntax-only", "-w", "-x", "c"], source, ".c")


def node_accepts(source: str) -> bool:
    """``node --check`` as a CommonJS script (``.cjs``) or, failing that, as an ES module (``.mjs``).

    Not ``.js``: node 20 then guesses the module kind and exits 0 on some ES-module text it never parsed.
    """
    return _run_on_file(["node", "--check"], source, ".cjs") or _run_on_file(["node", "--check"], source, ".mjs")


@functools.cache
def _tree_sitter_parser(language: str):  # type: ignore[no-untyped-def]
    import tree_sitter

    if language == "go":
        import tree_sitter_go as grammar
    else:
        import tree_sitter_java as grammar
    return tree_sitter.Parser(tree_sitter.Language(grammar.language()))


def tree_sitter_accepts(language: str, source: str) -> bool:
    """Whether tree-sitter parses ``source`` without ERROR or MISSING nodes."""
    tree = _tree_sitter_parser(language).parse(source.encode("utf-8"))
    return not tree.root_node.has_error


ORACLES: dict[str, Callable[[str], bool]] = {
    "sql": sqlite_accepts,
    "c": gcc_accepts,
    "go": lambda source: tree_sitter_accepts("go", source),
    "java": lambda source: tree_sitter_accepts("java", source),
    "javascript": node_accepts,
}
