"""`as_grammar`: every form `grammar=` accepts, and clear errors for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemask import Grammar, GrammarError
from codemask.grammar.resolve import as_grammar
from tests.data_paths import TEST_DATA

GRAMMARS = TEST_DATA / "grammars"


def test_grammar_objects_pass_through() -> None:
    grammar = Grammar.from_regex("a+")
    assert as_grammar(grammar) is grammar


def test_builtin_names_files_and_ebnf_text() -> None:
    assert as_grammar("json").cache_key == Grammar.builtin("json").cache_key
    gbnf = next(GRAMMARS.glob("**/json.gbnf"))
    assert as_grammar(str(gbnf)).cache_key == Grammar.from_file(gbnf).cache_key
    assert as_grammar(gbnf).cache_key == Grammar.from_file(gbnf).cache_key
    assert as_grammar('root ::= "yes" | "no"').kind == Grammar.from_ebnf('root ::= "yes" | "no"').kind


def test_unknown_forms_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(GrammarError, match="not a builtin grammar"):
        as_grammar("jsonn")
    with pytest.raises(GrammarError, match="does not exist"):
        as_grammar(str(tmp_path / "missing.gbnf"))
    with pytest.raises(TypeError, match="grammar= takes"):
        as_grammar(42)
    with pytest.raises(GrammarError, match="1:10"):
        as_grammar("root ::= undefined_rule")
