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


def test_cache_info_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """``codemask cache info`` shows the folder, its entries and the cap; ``cache clear`` empties
    it (entries and older versions' pickles alike), and a bad cap is a clear error."""
    from codemask import Grammar, GrammarCompiler, Vocabulary
    from codemask.assets import load_tokenizer

    folder = tmp_path / "compiled"
    GrammarCompiler(Vocabulary.from_tokenizer(load_tokenizer("gpt2")), cache_dir=folder,
                    progress=False).compile(Grammar.from_regex("[a-z]+"))
    (folder / "old.pkl").write_bytes(b"x" * 1000)
    monkeypatch.setenv("CODEMASK_CACHE_MAX_MB", "300")
    assert main(["cache", "info", "--dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"folder: {folder}\n" in out and "entries: 1, " in out and "of 300 MB" in out and "stale files" in out
    assert main(["cache", "clear", "--dir", str(folder)]) == 0
    assert "removed 2 file(s)" in capsys.readouterr().out and not list(folder.iterdir())
    monkeypatch.setenv("CODEMASK_CACHE_MAX_MB", "-3")
    assert main(["cache", "info", "--dir", str(folder)]) == 1
    assert "CODEMASK_CACHE_MAX_MB must be a finite number" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["generate", "--max-new-tokens", "-5", "hi"], "argument --max-new-tokens: must be a positive integer, got -5"),
    (["generate", "--top-p", "2", "hi"], r"argument --top-p: must be in \(0, 1\], got 2"),
    (["generate", "--top-p", "0", "hi"], r"argument --top-p: must be in \(0, 1\], got 0"),
    (["generate", "--temperature", "-1", "hi"], "argument --temperature: must be a number >= 0, got -1"),
    (["generate", "--temperature", "nan", "hi"], "argument --temperature: must be a finite number, got nan"),
    (["generate", "--top-k", "-2", "hi"], "argument --top-k: must be an integer >= 0, got -2"),
    (["generate", "--max-new-tokens", "ten", "hi"], "argument --max-new-tokens: not an integer: 'ten'"),
    (["demo", "--max-new-tokens", "0"], "argument --max-new-tokens: must be a positive integer, got 0"),
])
def test_numbers_are_checked_before_any_model_loads(args: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A bad number was only refused after a 3 s model load (or not at all): now argparse refuses
    it with exit status 2, and no model is touched."""
    from codemask import assets

    monkeypatch.setattr(assets, "load_model", lambda *_a, **_k: pytest.fail("a model was loaded"))
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_folders_that_hold_no_model_or_tokenizer_are_clear_errors(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--model``/``--tokenizer`` folders that hold no model or tokenizer gave a transformers
    traceback: now one line naming the folder, exit status 1."""
    (tmp_path / "config.json").write_text("{}")
    assert main(["generate", "--model", str(tmp_path), "hi"]) == 1
    assert f"codemask: cannot load a model from {tmp_path}:" in capsys.readouterr().err
    assert main(["generate", "--model", str(tmp_path / "missing"), "hi"]) == 1
    assert "is neither a packaged model" in capsys.readouterr().err
    grammar = tmp_path / "g.gbnf"
    grammar.write_text('root ::= "a"\n')
    assert main(["check-grammar", "--tokenizer", str(tmp_path), str(grammar)]) == 1
    assert f"codemask: cannot load a tokenizer from {tmp_path}:" in capsys.readouterr().err
    latin1 = tmp_path / "latin1.gbnf"
    latin1.write_bytes(b'root ::= "caf\xe9"\n')
    assert main(["check-grammar", str(latin1)]) == 1
    assert "not UTF-8 text" in capsys.readouterr().err
