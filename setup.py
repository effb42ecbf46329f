"""Build hook: ship the top-level ``grammars/`` folder inside the wheel as ``codemask/grammars``.

Everything else about the build is in ``pyproject.toml``. Editable installs and source checkouts
read ``grammars/`` where it is (see ``codemask.grammar.builtin``), so it exists once in the tree.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

GRAMMAR_SUFFIXES = {".ebnf", ".gbnf", ".lark"}


class BuildPyWithGrammars(build_py):
    def run(self) -> None:
        super().run()
        source = Path(__file__).resolve().parent / "grammars"
        target = Path(self.build_lib) / "codemask" / "grammars"
        target.mkdir(parents=True, exist_ok=True)
        for file in sorted(source.iterdir()):
            if file.suffix in GRAMMAR_SUFFIXES:
                shutil.copyfile(file, target / file.name)


setup(cmdclass={"build_py": BuildPyWithGrammars})
