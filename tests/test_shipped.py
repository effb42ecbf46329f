"""The shipped data folders: a checkout reads grammars/ and monitors/ where they are, and a wheel carries
them inside the package, where an installed codemask finds them with no checkout beside it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codemask.shipped import FOLDERS, data_dirs

ROOT = Path(__file__).resolve().parents[1]


def test_a_checkout_reads_the_top_level_folders() -> None:
    for folder in FOLDERS:
        assert ROOT / folder in data_dirs(folder)


def test_an_unknown_folder_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no shipped data folder 'samples'"):
        data_dirs("samples")


def test_the_wheel_carries_the_grammars_and_the_monitor_languages(tmp_path: Path) -> None:
    """setup.py's build_py copies grammars/ (with the sample code in grammars/samples/) and the monitors'
    language definitions into the built package, and codemask finds them there when it is installed
    from that build (no checkout next to it)."""
    build = tmp_path / "lib"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(build)], cwd=ROOT, check=True,
                   capture_output=True)
    shipped = sorted(p.name for p in (build / "codemask" / "grammars").iterdir() if p.is_file())
    assert shipped == sorted(p.name for p in (ROOT / "grammars").iterdir() if p.suffix in {".ebnf", ".gbnf", ".lark"})
    assert (build / "codemask/grammars/json.ebnf").read_bytes() == (ROOT / "grammars/json.ebnf").read_bytes()
    samples = sorted(p.name for p in (build / "codemask/grammars/samples").iterdir())
    assert samples == sorted(p.name for p in (ROOT / "grammars/samples").iterdir()) and "python.txt" in samples
    languages = sorted(p.name for p in (build / "codemask" / "monitors").glob("*.toml"))
    assert languages == sorted(p.name for p in (ROOT / "monitors").glob("*.toml")) and "python.toml" in languages
    tour = ROOT / "grammars/samples/python.txt"
    probe = ("from codemask.grammar.builtin import grammar_dirs, load_builtin; "
             "from codemask.engine.samples import tour_text; "
             "from codemask.monitors.spec import language_spec, languages; "
             "print(grammar_dirs()); print(load_builtin('json').ir.start); "
             f"print(tour_text(load_builtin('python')) == open({str(tour)!r}).read()); "
             "print(languages()); print(language_spec('python').default_server)")
    env = {**os.environ, "PYTHONPATH": str(build), "OMP_WAIT_POLICY": "PASSIVE"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, check=True, capture_output=True,
                         text=True).stdout.splitlines()
    assert out == [f"[PosixPath('{build / 'codemask' / 'grammars'}')]", "root", "True",
                   str(sorted(p.stem for p in (ROOT / "monitors").glob("*.toml"))), "pyrefly"]
