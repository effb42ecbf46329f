"""Build hooks: ship the top-level ``grammars/`` folder (and its ``samples/``) inside the wheel as
``codemask/grammars``, and build the mask cache's trie walk and the parser's closures in C
(``codemask.engine._native``).

Everything else about the build is in ``pyproject.toml``. Editable installs and source checkouts
read ``grammars/`` where it is (see ``codemask.grammar.builtin``), so it exists once in the tree.
The extension is optional: where no C compiler is found the build goes on without it and the
engine walks the trie with numpy and computes closures in Python (``codemask.engine.native``).
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
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
        # sample code the masks are precomputed on (codemask.engine.samples)
        (target / "samples").mkdir(exist_ok=True)
        for file in sorted((source / "samples").iterdir()):
            shutil.copyfile(file, target / "samples" / file.name)


NATIVE = Extension("codemask.engine._native", ["src/codemask/engine/_native.c"], optional=True,
                   extra_compile_args=["-O2", "-std=c99"])

setup(cmdclass={"build_py": BuildPyWithGrammars}, ext_modules=[NATIVE])
