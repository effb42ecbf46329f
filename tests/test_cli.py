"""The `codemask` command: check-grammar, generate and the README's demo."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codemask.cli import main
from tests.data_paths import TEST_DATA

GBNF = TEST_DATA / "grammars" / "gbnf"


def test_check_grammar_accepts_a_real_grammar(capsys: pytest.CaptureFixture[str]) -> None:
    path = next(GBNF.glob("**/arithmetic.gbnf"))
    assert main(["check-grammar", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: ok" in out and "CompiledGrammar(" in out


def test_check_grammar_reports_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.gbnf"
    path.write_text('root ::= item+\nitem ::= "a" | ("b"\n')
    assert main(["check-grammar", str(path)]) == 1
    err = capsys.readouterr().err
    assert re.search(rf"{re.escape(str(path))}:2:16: unclosed '\('", err), err
    path.write_text("root ::= missing\n")
    assert main(["check-grammar", str(path)]) == 1
    assert "undefined rule 'missing'" in capsys.readouterr().err


def test_the_console_script_is_installed() -> None:
    script = shutil.which("codemask", path=str(Path(sys.executable).parent))
    assert script is not None
    done = subprocess.run([script, "--help"], capture_output=True, text=True, check=True)
    for command in ("demo", "generate", "check-grammar"):
        assert command in done.stdout


@pytest.mark.slow
def test_generate_with_a_regex(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--regex", r"(yes|no)", "--max-new-tokens", "5", "Is the sky blue?"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() in {"yes", "no"}
    assert "finished: grammar_end" in captured.err and "tok/s" in captured.err


@pytest.mark.slow
def test_generate_with_a_grammar_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "list.gbnf"
    path.write_text('root ::= "[" item ("," item){0,4} "]"\nitem ::= [0-9]{1,3}\n')
    args = ["generate", "--grammar", str(path), "--max-new-tokens", "30", "Three small numbers as a JSON array:"]
    assert main(args) == 0
    assert isinstance(json.loads(capsys.readouterr().out.strip()), list)


@pytest.mark.slow
def test_demo_outputs_are_valid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "== JSON object" in out and "== Python function" in out
    assert out.count("-- valid") == 2 and "all outputs valid" in out
    assert "tok/s" in out and "forward passes" in out


def test_warm_saves_a_mask_state_that_a_later_compile_starts_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``codemask warm`` runs real files through the Python grammar and saves its mask state in the
    disk cache; a compiler made afterwards over that cache starts with those classifications.
    A byte-level grammar and an unreadable file are clear errors."""
    from codemask import Grammar, GrammarCompiler, Vocabulary
    from codemask.assets import load_tokenizer
    from codemask.engine import compiler as compiler_module
    from codemask.engine.lexer_masks import LexerMaskComputer

    monkeypatch.setattr(compiler_module, "default_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(compiler_module, "has_samples", lambda _grammar: False)  # what warm saves, alone
    source = Path(textwrap.__file__)
    assert main(["warm", "--grammar", "python", str(source)]) == 0
    out = capsys.readouterr().out
    assert f"{source}: " in out and "saved" in out and "(the grammar refuses" not in out
    later = GrammarCompiler(Vocabulary.from_tokenizer(load_tokenizer("smollm2")), cache_dir=tmp_path, progress=False)
    masks = later.compile(Grammar.builtin("python")).masks
    assert isinstance(masks, LexerMaskComputer) and masks.num_classified > 50

    assert main(["warm", "--grammar", "json", str(source)]) == 1
    assert "not a lexer-mode grammar" in capsys.readouterr().err
    assert main(["warm", "--grammar", "python", str(tmp_path / "missing.py")]) == 1
    assert "cannot read it" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(compiler_module, "default_cache_dir", lambda: blocker / "compiled")
    assert main(["warm", "--grammar", "python", str(source)]) == 1
    assert "could not write the mask state" in capsys.readouterr().err
